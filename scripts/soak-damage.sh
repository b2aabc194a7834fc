#!/usr/bin/env bash
# Damage-model soak (not part of scripts/test.sh): the trials of crates/engine/tests/damage/
# depend on the timing of their writer threads, and a loaded machine reaches file layouts a
# quiet one does not. This runs every trial of the model (the hash and the fixed-length kind,
# on SimVfs) ROUNDS times (default 3), JOBS at once (default 2) beside HOGS busy loops (default
# 2), and prints each failure with its seed; KURA_DAMAGE_SEED=N with the test name reruns one
# trial. Exit status 0 when none failed, 1 otherwise. Bounded: it stops after LIMIT (default
# 1800) seconds; the busy loops are stopped by their pids.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3} JOBS=${JOBS:-2} HOGS=${HOGS:-2} LIMIT=${LIMIT:-1800}
bin=$(cargo test -p kura-engine --test damage --no-run 2>&1 | grep -o 'target/[^ )]*damage-[0-9a-f]*' | head -1)
[ -x "$bin" ] || { echo "soak-damage: the damage test did not build" >&2; exit 2; }
out=$(mktemp -d)
hogs=()
cleanup() { for p in "${hogs[@]:-}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$out"; }
trap cleanup EXIT
for _ in $(seq "$HOGS"); do ( while :; do :; done ) & hogs+=($!); done
end=$((SECONDS + LIMIT))
fails=0 runs=0
# The tests of the model and the seeds each covers (damage/main.rs: trials(from, to)).
tests="damage_model_sim_0 damage_model_sim_1 damage_model_sim_2 damage_model_sim_3 damage_model_kf_sim_0 damage_model_kf_sim_1"
for round in $(seq "$ROUNDS"); do
	for t in $tests; do
		[ "$SECONDS" -lt "$end" ] || break 2
		runs_now=()
		for j in $(seq "$JOBS"); do
			"$bin" "$t" --exact -q >"$out/$t-$round-$j.log" 2>&1 &
			runs_now+=($!)
		done
		for p in "${runs_now[@]}"; do wait "$p" || true; done
		for j in $(seq "$JOBS"); do
			runs=$((runs + 1))
			if grep -q "panicked" "$out/$t-$round-$j.log"; then
				fails=$((fails + 1))
				grep -m1 -A1 "panicked" "$out/$t-$round-$j.log" | tail -1 | cut -c1-400
			fi
		done
	done
done
echo "soak-damage: $runs runs of the model's tests, $fails failed"
[ "$fails" -eq 0 ]
