# Sourced by bench/precision_ladder.sh and bench/fp8_recipe_cost.sh: ladder_flags RUNG prints mantissa-train's flags
# for a rung of issue 36's precision ladder (docs/precision_ladder.md), under --precision=bf16 and Adam:
#   baseline      fp32 masters, fp32 moments (the 2018 recipe)
#   state-bf16    fp32 masters, bf16 moments          state-8bit   fp32 masters, 8-bit block-wise moments
#   nearest       bf16 weights, round to nearest (the naive rung), fp32 moments
#   stochastic    bf16 weights, stochastic rounding, fp32 moments
#   kahan         bf16 weights, Kahan compensation, fp32 moments
#   stochastic-8bit / kahan-8bit   bf16 weights and 8-bit moments: the smallest rungs
# and ladder_bytes RUNG its bytes per parameter with Adam (weights, working copy, grads, moments, compensation).
ladder_flags() {
  case "$1" in
    baseline) echo "" ;;
    state-bf16) echo "--optimizer_state=bf16" ;;
    state-8bit) echo "--optimizer_state=8bit" ;;
    nearest | stochastic | kahan) echo "--master_weights=none --update_rounding=$1" ;;
    stochastic-8bit | kahan-8bit) echo "--master_weights=none --update_rounding=${1%-8bit} --optimizer_state=8bit" ;;
    *) echo "ladder: unknown rung $1" >&2; return 2 ;;
  esac
}
ladder_bytes() {
  case "$1" in
    baseline) echo "18" ;;               # 4 master + 2 copy + 4 grad + 8 moments
    state-bf16) echo "14" ;;             # 4 + 2 + 4 + 4
    state-8bit) echo "12.004" ;;         # 4 + 2 + 4 + 2 x (1 + 4/2048)
    nearest | stochastic) echo "12" ;;   # 2 weights + 2 grad + 8 moments
    kahan) echo "14" ;;                  # + 2 compensation
    stochastic-8bit) echo "6.004" ;;     # 2 + 2 + 2 x (1 + 4/2048)
    kahan-8bit) echo "8.004" ;;
  esac
}
