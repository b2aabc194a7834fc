#!/usr/bin/perl
# Cache::Memcached (the original Perl client) against kura serve. Usage: cache_memcached.pl HOST:PORT
# Prints "perl: N passed, M failed" and exits non-zero on any failure.
use strict;
use warnings;
use Cache::Memcached;

my $server = shift or die "usage: $0 HOST:PORT\n";
my $mc = Cache::Memcached->new({ servers => [$server], compress_threshold => 1_000_000 });
my ($pass, $fail) = (0, 0);
sub check { my ($ok, $what) = @_; if ($ok) { $pass++ } else { $fail++; print STDERR "FAIL: $what\n" } }

check($mc->set("a", "hello"), "set");
check(($mc->get("a") // "") eq "hello", "get");
check(!$mc->add("a", "x"), "add existing");
check($mc->add("b", "y"), "add new");
check($mc->replace("a", "h2"), "replace");
check(!$mc->replace("nope", "z"), "replace missing");
my $h = $mc->get_multi("a", "b", "zz");
check(($h->{a} // "") eq "h2" && ($h->{b} // "") eq "y" && !exists $h->{zz}, "get_multi");
check($mc->set("ref", { x => [1, 2, 3] }), "set a structure (Storable, flags)");
my $r = $mc->get("ref");
check(ref($r) eq "HASH" && $r->{x}[2] == 3, "get a structure back");
check($mc->set("n", 5), "set counter");
check(($mc->incr("n", 10) // -1) == 15, "incr");
check(($mc->decr("n", 100) // -1) == 0, "decr stops at 0");
check(!defined $mc->incr("absent", 1), "incr missing");
check($mc->delete("a"), "delete");
check(!$mc->delete("a"), "delete missing");
my $big = "z" x 500_000;
check($mc->set("big", $big), "set 500 KB");
check(($mc->get("big") // "") eq $big, "get 500 KB");
check($mc->flush_all, "flush_all");
check(!defined $mc->get("b"), "get after flush");

print "perl: $pass passed, $fail failed\n";
exit($fail ? 1 : 0);
