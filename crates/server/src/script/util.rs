//! Helpers both script interfaces give: packing, codecs, hashes, string and set functions.
