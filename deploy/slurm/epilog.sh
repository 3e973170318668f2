#!/usr/bin/env bash
# Slurm epilog (Epilog= in slurm.conf): remove this job from the per-GPU mapping files written by
# prolog.sh; a file left without jobs is deleted, so the GPU's series lose their hpc_job label.
#
# Environment: FLEETSCOPE_HPC_JOB_MAPPING_DIR (default /run/fleetscope/hpc-jobs).
# Never fails: problems are logged to stderr and the script exits 0.
set -u

dir="${FLEETSCOPE_HPC_JOB_MAPPING_DIR:-/run/fleetscope/hpc-jobs}"
job="${SLURM_JOB_ID:-}"
[[ -n "$job" && -d "$dir" ]] || exit 0

# Look at every mapping file, not only SLURM_JOB_GPUS: the job id must not outlive the job even
# if the GPU list differs between prolog and epilog.
for file in "$dir"/*; do
    [[ -f "$file" ]] || continue
    grep -qx -- "$job" "$file" || continue
    name="$(basename -- "$file")"
    tmp="$(mktemp "$dir/.$name.XXXXXX")" || continue
    grep -vx -- "$job" "$file" > "$tmp" || true
    if [[ -s "$tmp" ]]; then
        chmod 0644 "$tmp"
        mv -f -- "$tmp" "$file"
    else
        rm -f -- "$tmp" "$file"
    fi
done
exit 0
