# The GPU benchmark datasets (sourced by scripts/bench/gpu_train.sh and ab_binaries.sh): RMAT
# parameters for `sluice-preprocess generate` per name. products-like: scale 21, edge factor 30,
# d = 100, 47 classes; reddit-like: scale 18, edge factor 218, d = 602, 41 classes.
# PRODUCTS_SCALE and REDDIT_SCALE override the scales (quick smoke runs at small sizes).
# shellcheck disable=SC2034  # read by the sourcing scripts
declare -A scale=([products]=${PRODUCTS_SCALE:-21} [reddit]=${REDDIT_SCALE:-18})
declare -A factor=([products]=30 [reddit]=218)
declare -A dim=([products]=100 [reddit]=602)
declare -A classes=([products]=47 [reddit]=41)
