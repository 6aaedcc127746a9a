#!/bin/sh
# Issue 19: the disk tier's fault-injection suite and its power-loss crash states, longer
# than `cargo test` runs them. ROUNDS damage rounds (each kind in turn, seeds from SEED) and
# STATES crash states; every byte served is verified and the counters checked. (The I/O
# error, disk full and kill -9 under load tests of the suite are bounded already: `cargo test
# -p trove --test faults` runs them as they are.)
#   bench/faults.sh                 # 60 rounds, 20,000 crash states
#   ROUNDS=600 STATES=100000 SEED=7 bench/faults.sh
set -eu
cd "$(dirname "$0")/.."
TROVE_FAULT_ROUNDS="${ROUNDS:-60}" TROVE_FAULT_SEED="${SEED:-19}" \
  cargo test --release -p trove --test faults -- --ignored --nocapture fault_injection_long
TROVE_CRASH_STATES="${STATES:-20000}" \
  cargo test --release -p trove-disk --test crash -- --nocapture
