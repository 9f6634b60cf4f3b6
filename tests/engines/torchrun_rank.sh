#!/usr/bin/env bash
# One rank of check_torchrun.sh, started by `torchrun --no-python`: writes what `gpusel run --local-rank`,
# gpusel::local_rank_device() (the rank device program) and `gpusel explain --json` give this rank, beside
# torchrun's own LOCAL_RANK, to $ENGINES_OUT/rank.$LOCAL_RANK. Exits 0 whatever they say: torchrun would end
# the other ranks at the first failure, before they report.
out=$ENGINES_OUT/rank.$LOCAL_RANK
command=$("$ENGINES_GPUSEL" run --local-rank -- sh -c 'echo $CUDA_VISIBLE_DEVICES' 2>"$out.command_err")
echo "command $? $command" >"$out"
library=$("$ENGINES_RANK_DEVICE" 2>"$out.library_err")
echo "library $? $library" >>"$out"
"$ENGINES_GPUSEL" explain --json >"$out.explain.json" 2>&1
exit 0
