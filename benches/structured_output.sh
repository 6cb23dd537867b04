#!/usr/bin/env bash
# Per-token decode cost with and without a JSON-schema constraint (README "Structured
# output"): `pocket run` on one model, unconstrained and with -j, interleaved, R rounds;
# prints each run's decode t/s and the medians.
#   benches/structured_output.sh POCKET MODEL [ROUNDS] [N]
set -euo pipefail
pocket=$1 model=$2 rounds=${3:-3} n=${4:-64}
prompt='<|im_start|>user
Describe this review as JSON: the noodles were great but the waiter was rude.<|im_end|>
<|im_start|>assistant
'
schema='{"type":"object","properties":{"summary":{"type":"string"},"aspects":{"type":"array","items":{"type":"object","properties":{"attribute":{"type":"string"},"opinion":{"type":"string"},"polarity":{"enum":["positive","negative","neutral"]}},"required":["attribute","opinion","polarity"]}}},"required":["summary","aspects"]}'
tps() { grep -o 'generation [0-9]* tokens in [0-9.]* ms ([0-9.]* t/s)' | sed 's/.*(\([0-9.]*\) t\/s)/\1/'; }
plain=() constrained=()
for r in $(seq "$rounds"); do
  a=$("$pocket" run -m "$model" -t 2 -c 512 -n "$n" --no-echo -p "$prompt" 2>&1 >/dev/null | tps)
  b=$("$pocket" run -m "$model" -t 2 -c 512 -n "$n" --no-echo -p "$prompt" -j "$schema" 2>&1 >/dev/null | tps)
  echo "round $r: plain $a t/s, json-schema $b t/s"
  plain+=("$a") constrained+=("$b")
done
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }
p=$(median "${plain[@]}") c=$(median "${constrained[@]}")
echo "median: plain $p t/s, json-schema $c t/s, per-token cost +$(awk -v p="$p" -v c="$c" 'BEGIN {printf "%.1f", (p/c-1)*100}') %"
