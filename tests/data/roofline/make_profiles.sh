#!/bin/bash
# The roofline fixtures: full-mode profiles (input shapes and argument values) made on the project's
# GPU machine through the device tool, from the repository root:
#   run(command="bash tests/data/roofline/make_profiles.sh", carry=[".whl"])
# (.whl: dlscope's wheels the host lacks, see bench/gpu_run.sh). Writes the profiles to
# $OUT/profiles.tar.gz and each one's roofline report beside it.
cd "$(dirname "$0")/../../.."
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 2
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
python3 -c "import torch; print(torch.__version__, torch.cuda.get_device_name())"
prof() {
  name=$1; shift
  timeout 240 python3 -m dlscope profile --mode full -q -f -o /tmp/p/$name.dlscope -- "$@" 2>&1 | tail -3
  python3 -m dlscope stats /tmp/p/$name.dlscope --report roofline > $OUT/$name.roofline.txt 2>&1
}
mkdir -p /tmp/p
prof mm_probe_bf16 python3 tests/data/roofline/mm_probe.py
prof gpt_bf16_full python3 bench/advice_truth/train.py --model gpt --variant bf16 --steps 8
prof cnn_bf16_full python3 bench/advice_truth/train.py --model cnn --variant bf16 --steps 6
prof gpt_fused_full python3 bench/advice_truth/train.py --model gpt --variant fused_opt --steps 6
prof odd_linear_k1001 python3 bench/programs/odd_linear.py --k 1001
prof odd_linear_k1008 python3 bench/programs/odd_linear.py --k 1008
cd /tmp/p && tar czf $OUT/profiles.tar.gz *.dlscope
