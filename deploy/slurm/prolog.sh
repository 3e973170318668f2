#!/usr/bin/env bash
# Slurm prolog (Prolog= in slurm.conf, runs as root on each node of the job before it starts):
# record which job uses which GPU, for fleetscope's hpc_job label.
#
# Writes the job id into <dir>/<gpu index> (one job id a line; dcgm-exporter's
# --hpc-job-mapping-dir convention, so either exporter can read it). The GPU indexes come from
# SLURM_JOB_GPUS (set in the prolog environment), else CUDA_VISIBLE_DEVICES. Pair it with
# epilog.sh. The exporter reads the directory with
#   fleetscope exporter --collector.gpu.hpc-job-mapping-dir=/run/fleetscope/hpc-jobs
#
# Environment: FLEETSCOPE_HPC_JOB_MAPPING_DIR (default /run/fleetscope/hpc-jobs).
# Never fails the job: a problem is logged to stderr and the script exits 0.
set -u

dir="${FLEETSCOPE_HPC_JOB_MAPPING_DIR:-/run/fleetscope/hpc-jobs}"
job="${SLURM_JOB_ID:-}"
gpus="${SLURM_JOB_GPUS:-${CUDA_VISIBLE_DEVICES:-}}"

if [[ -z "$job" || -z "$gpus" ]]; then
    exit 0  # not a GPU job (or not run by Slurm): nothing to record
fi
if ! mkdir -p "$dir" 2>/dev/null; then
    echo "fleetscope prolog: cannot create $dir" >&2
    exit 0
fi

IFS=',' read -r -a indexes <<< "$gpus"
for gpu in "${indexes[@]}"; do
    gpu="${gpu//[[:space:]]/}"
    if [[ ! "$gpu" =~ ^[0-9]+(\.[0-9]+)?$ ]]; then
        echo "fleetscope prolog: skipping GPU id '$gpu' (not an index)" >&2
        continue
    fi
    file="$dir/$gpu"
    # Append unless already there (a requeued job runs the prolog again); write atomically.
    if [[ -f "$file" ]] && grep -qx -- "$job" "$file"; then
        continue
    fi
    tmp="$(mktemp "$dir/.$gpu.XXXXXX")" || continue
    { [[ -f "$file" ]] && cat -- "$file"; echo "$job"; } > "$tmp"
    chmod 0644 "$tmp"
    mv -f -- "$tmp" "$file"
done
exit 0
