# The paths the GPU calls share (sourced by tools/gpu_prepare.sh, which builds them, and tools/gpu_after.sh,
# which files and reports a call's results); each may be set in the environment instead.
TLM=${TLM:-.venv/bin/tlm}
BUNDLE_C=${BUNDLE_C:-work/gpu2/bundle-c-rest}
DBS=${DBS:-work/gpu4}
PLANS_DIR=${PLANS_DIR:-work/gpu4/plans}
HELDOUT_ALL=${HELDOUT_ALL:-results/gpu/bundles/bundle-heldout-all}  # its manifest and tasks: all ingest reads
CNN=${CNN:-work/gpu5}
CNN_WORKLOADS="mobilenet_v2-b1-i224 resnet_50-b1-i224"
RUN_A=results/gpu/run-2026-12-04-h200-a
# the three candidate TLMs (FT604, B2, JOINT): their files as the picks were made, kept in pretrained/candidates
FT604=${FT604:-pretrained/candidates/tlm-ft604-cuda-sm90}
FT604_PROPOSALS=${FT604_PROPOSALS:-work/gpu6/heldout-ft604}
S64_PROPOSALS=${S64_PROPOSALS:-work/gpu6/heldout-s64}
B2=${B2:-pretrained/candidates/tlm-b2-cuda-sm90}
B2_PROPOSALS=${B2_PROPOSALS:-work/gpu6/heldout-b2}
JOINT=${JOINT:-pretrained/candidates/tlm-joint-llvm-cuda}
JOINT_PROPOSALS=${JOINT_PROPOSALS:-work/gpu6/heldout-joint}
PICKS_COMMITTED=results/gpu/bundles/picks-2026-12-07c/picks.jsonl.xz  # picks-2026-12-07b's 379 and tlm-joint-cm's 90
PICKS=${PICKS:-$DBS/bundle-heldout-picks-c}
R1=${R1:-work/gpu7/bundle-r1}
R1_COMMITTED=results/gpu/bundles/r1-2026-12-07
R2=${R2:-work/gpu7/bundle-r2}
R2_COMMITTED=results/gpu/bundles/r2-2026-12-07
CM=pretrained/costmodel-cuda-sm90
ALL4="bert_base-b1-s128 gpt2-b1-s128 resnet_50-b1-i224 mobilenet_v2-b1-i224"
