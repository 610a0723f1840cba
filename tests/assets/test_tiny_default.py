from transformers import AutoModelForCausalLM, AutoTokenizer

from infgrpo.assets import TINY_DATA_DIR, TINY_MODEL_DIR
from infgrpo.assets.build import main as build_main


def test_shipped_model_loads_with_auto_classes_and_is_small():
    model = AutoModelForCausalLM.from_pretrained(TINY_MODEL_DIR)
    tok = AutoTokenizer.from_pretrained(TINY_MODEL_DIR)
    assert model.config.model_type == "qwen3"
    assert tok.chat_template and tok.eos_token == "<|im_end|>"
    text = tok.apply_chat_template([{"role": "user", "content": "rev abc"}], tokenize=False, add_generation_prompt=True)
    assert text.endswith("<|im_start|>assistant\n")
    size = sum(f.stat().st_size for f in TINY_MODEL_DIR.iterdir())
    assert size < 5 * 2**20
    assert (TINY_DATA_DIR / "train.jsonl").exists() and (TINY_DATA_DIR / "eval.jsonl").exists()


def test_build_script_reproduces_a_loadable_model(tmp_path):
    build_main(["--out", str(tmp_path), "--steps", "3", "--n-train", "64", "--n-eval", "8", "--batch-size", "4"])
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "tiny-qwen3")
    tok = AutoTokenizer.from_pretrained(tmp_path / "tiny-qwen3")
    assert model.config.vocab_size == len(tok)
    assert len((tmp_path / "tiny-data" / "eval.jsonl").read_text().splitlines()) == 8
