"""A vision-language run's bad input through ``python -m infgrpo.fit`` (``configs/vlm-tiny.yaml``): one ``error:``
line before the model loads, naming the setting and what is valid. The data side's refusals run in the same step
("model and data", the first rows): tests/data/test_images.py tests them on ``check_first_rows`` itself."""

from tests.test_fit import ROOT, cli_error

VLM = ["--config", str(ROOT / "configs" / "vlm-tiny.yaml")]


def test_a_baseline_decoder_is_one_line_before_the_model_loads(capsys):
    line = cli_error(capsys, *VLM, "--model.sampler.decoder", "hf_full")
    assert "model.sampler.decoder='hf_full' decodes token ids only, and 'qwen2_5_vl' is a vision-language model" in line
    assert line.endswith("use model.sampler.decoder: engine")
