"""PromptDataModule: prompts (with their metadata) from ``datasets``, tokenized with a chat template.

Each training batch is a list of ``batch_size`` items ``{"prompt_ids": list[int], "prompt_text": str,
"meta": dict}``; ``prompt_text`` is the user turn (the prompt after ``prompt_template``, before the chat
template and any system prompt) and ``meta`` the dataset row (it reaches the reward functions). The
shuffled order is seeded and resumes mid-epoch from a checkpoint.

Under data parallelism (``trainer.strategy: ddp``) the module shards prompts itself: each of the
``world_size`` ranks gets a contiguous ``batch_size`` share of every global batch of
``batch_size * world_size`` prompts (see :mod:`infgrpo.data.resumable`), and a strided share of the
held-out prompts. Lightning's own sampler injection must then be off
(``use_distributed_sampler=False``, the CLI's default).

Sources (``path``): ``"tiny"`` (the shipped synthetic task), a local folder holding
``<split>.jsonl`` / ``.json`` / ``.csv`` / ``.parquet`` files, or a Hugging Face hub dataset name.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
from torch.utils.data import DataLoader
from transformers import AutoTokenizer, PreTrainedTokenizerBase

from infgrpo.assets import TINY_DATA_DIR, resolve_model_path
from infgrpo.data.resumable import ResumableBatchSampler

FILE_TYPES = {".jsonl": "json", ".json": "json", ".csv": "csv", ".parquet": "parquet"}


def load_rows(path: str, split: str, config_name: str | None = None) -> list[dict[str, Any]]:
    """Rows of ``split`` from the tiny task, a local folder of split files, or a hub dataset."""
    import datasets

    folder = TINY_DATA_DIR if path == "tiny" else Path(path)
    if folder.is_dir():
        files = [folder / f"{split}{ext}" for ext in FILE_TYPES if (folder / f"{split}{ext}").exists()]
        if not files:
            raise ValueError(
                f"data.path={path!r} has no file for split {split!r}; expected one of "
                f"{', '.join(split + e for e in FILE_TYPES)}"
            )
        ds = datasets.load_dataset(FILE_TYPES[files[0].suffix], data_files=str(files[0]), split="train")
    else:
        ds = datasets.load_dataset(path, config_name, split=split)
    return [dict(r) for r in ds]


def encode_prompt(
    tokenizer: PreTrainedTokenizerBase, prompt: str, system_prompt: str | None, chat_template: bool
) -> list[int]:
    """Token ids of a prompt, wrapped in the tokenizer's chat template when asked and available."""
    if chat_template and tokenizer.chat_template:
        messages = ([{"role": "system", "content": system_prompt}] if system_prompt else []) + [
            {"role": "user", "content": prompt}
        ]
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return tokenizer(text, add_special_tokens=False)["input_ids"]
    return tokenizer(prompt)["input_ids"]


class PromptDataModule(L.LightningDataModule):
    """Prompts for GRPO rollouts, and held-out prompts for evaluation.

    Args:
        path: ``"tiny"``, a folder of split files, or a hub dataset name.
        config_name: the hub dataset's configuration (e.g. ``main`` for ``openai/gsm8k``).
        tokenizer: tokenizer name or folder (``"tiny"`` = the shipped one); usually linked to the model.
        train_split: split used for training rollouts.
        eval_split: held-out split used for validation (None disables validation).
        prompt_column: column holding the prompt text.
        answer_column: column holding the reference answer; reward functions see it as
            ``metadata["answer"]`` (None = the rows as they are).
        prompt_template: a ``str.format`` template over the row's columns, e.g.
            ``"{question}\\nPut the final answer after ####."``; None = the prompt column as is.
        batch_size: prompts per optimization step *per rank* (each sampled ``group_size`` times);
            with N data-parallel ranks a step uses N x batch_size prompts.
        eval_size: number of held-out prompts evaluated (the first ones of the split).
        eval_batch_size: prompts decoded at once during evaluation.
        max_prompt_length: prompts longer than this many tokens are reported and handled by
            ``long_prompts``; they are never truncated.
        long_prompts: ``"error"`` (stop with a message) or ``"skip"`` (drop them, with a warning).
        system_prompt: optional system message put before each prompt (needs the chat template).
        chat_template: wrap prompts in the tokenizer's chat template.
        seed: seed of the shuffled order.
    """

    def __init__(
        self,
        path: str = "tiny",
        config_name: str | None = None,
        tokenizer: str = "tiny",
        train_split: str = "train",
        eval_split: str | None = "eval",
        prompt_column: str = "prompt",
        answer_column: str | None = None,
        prompt_template: str | None = None,
        batch_size: int = 4,
        eval_size: int = 200,
        eval_batch_size: int = 128,
        max_prompt_length: int = 128,
        long_prompts: str = "error",
        system_prompt: str | None = None,
        chat_template: bool = True,
        seed: int = 0,
    ) -> None:
        super().__init__()
        if batch_size < 1:
            raise ValueError(f"data.batch_size={batch_size} must be >= 1")
        if long_prompts not in ("error", "skip"):
            raise ValueError(f"data.long_prompts={long_prompts!r}; valid: 'error', 'skip'")
        if max_prompt_length < 1:
            raise ValueError(f"data.max_prompt_length={max_prompt_length} must be >= 1")
        self.save_hyperparameters()
        self.train_items: list[dict] = []
        self.eval_items: list[dict] = []
        self.batch_sampler: ResumableBatchSampler | None = None
        self._pending_state: dict | None = None

    def _encode(self, tokenizer: PreTrainedTokenizerBase, rows: list[dict], split: str) -> list[dict]:
        hp = self.hparams
        if hp.system_prompt and not (hp.chat_template and tokenizer.chat_template):
            why = "data.chat_template is false" if not hp.chat_template else "the tokenizer has no chat template"
            raise ValueError(
                f"data.system_prompt={hp.system_prompt[:40]!r} is set but {why}, so there is no system message "
                "to put it in; drop it, or put the instructions into data.prompt_template"
            )
        items, too_long = [], []
        for i, row in enumerate(rows):
            if hp.prompt_column not in row:
                raise ValueError(
                    f"data.prompt_column={hp.prompt_column!r} is not a column of split {split!r}; "
                    f"columns: {', '.join(row)}"
                )
            if hp.answer_column is not None:
                if hp.answer_column not in row:
                    raise ValueError(
                        f"data.answer_column={hp.answer_column!r} is not a column of split {split!r}; "
                        f"columns: {', '.join(row)}"
                    )
                row = {**row, "answer": row[hp.answer_column]}
            text = str(row[hp.prompt_column])
            if hp.prompt_template is not None:
                try:
                    text = hp.prompt_template.format(**row)
                except KeyError as err:
                    raise ValueError(
                        f"data.prompt_template names column {err} that split {split!r} lacks; columns: {', '.join(row)}"
                    ) from err
            ids = encode_prompt(tokenizer, text, hp.system_prompt, hp.chat_template)
            if len(ids) > hp.max_prompt_length:
                too_long.append((i, len(ids)))
                continue
            items.append({"prompt_ids": ids, "prompt_text": text, "meta": row})
        if too_long:
            i, n = too_long[0]
            msg = (
                f"{len(too_long)} of {len(rows)} prompts of split {split!r} are longer than "
                f"data.max_prompt_length={hp.max_prompt_length} tokens (e.g. row {i}: {n} tokens)"
            )
            if hp.long_prompts == "error":
                raise ValueError(msg + "; raise max_prompt_length or set data.long_prompts: skip")
            print(f"[infgrpo] skipping: {msg}")
        return items

    def setup(self, stage: str) -> None:
        """Loads and tokenizes the training and held-out prompts, once for every stage."""
        if self.train_items:
            return
        tok = AutoTokenizer.from_pretrained(resolve_model_path(self.hparams.tokenizer))
        hp = self.hparams
        self.train_items = self._encode(tok, load_rows(hp.path, hp.train_split, hp.config_name), hp.train_split)
        if hp.eval_split:
            rows = load_rows(hp.path, hp.eval_split, hp.config_name)[: hp.eval_size]
            self.eval_items = self._encode(tok, rows, hp.eval_split)

    def ranks(self) -> tuple[int, int]:
        """(world_size, global rank) of the trainer; (1, 0) without one."""
        trainer = self.trainer
        if trainer is None or trainer.world_size == 1:
            return 1, 0
        if getattr(trainer._accelerator_connector, "use_distributed_sampler", False):
            raise ValueError(
                f"PromptDataModule shards prompts across the {trainer.world_size} ranks itself; set "
                "Trainer(use_distributed_sampler=False) (--trainer.use_distributed_sampler false; the "
                "infgrpo.fit CLI sets it)"
            )
        return trainer.world_size, trainer.global_rank

    def train_dataloader(self) -> DataLoader:
        """This rank's shuffled batches (lists of items), resuming a checkpoint's position when one is pending."""
        world, rank = self.ranks()
        self.batch_sampler = ResumableBatchSampler(
            len(self.train_items), self.hparams.batch_size, self.hparams.seed, num_replicas=world, rank=rank
        )
        if self._pending_state is not None:
            self.batch_sampler.load_state_dict(self._pending_state)
            self._pending_state = None
        return DataLoader(self.train_items, batch_sampler=self.batch_sampler, collate_fn=list)

    def val_dataloader(self) -> DataLoader | list:
        """This rank's strided share of the held-out prompts, ``eval_batch_size`` at a time ([] without any)."""
        if not self.eval_items:
            return []
        world, rank = self.ranks()
        if world > len(self.eval_items):
            n = len(self.eval_items)
            raise ValueError(
                f"data.eval_size: {n} held-out prompts cannot be split over {world} ranks (one each at least)"
            )
        mine = self.eval_items[rank::world]  # metrics are averaged over ranks by torchmetrics
        return DataLoader(mine, batch_size=self.hparams.eval_batch_size, collate_fn=list)

    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """Counts a training batch as consumed (the resumable position); returns ``batch`` unchanged.

        Runs for the batch training is about to use (after Lightning's prefetch), so counting
        here records consumed batches exactly.
        """
        if self.trainer is not None and self.trainer.training and self.batch_sampler is not None:
            self.batch_sampler.mark_consumed()
        return batch

    def state_dict(self) -> dict[str, Any]:
        """The batch sampler's position in the data ({} before the first training dataloader)."""
        return {"sampler": self.batch_sampler.state_dict()} if self.batch_sampler else {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Keeps a saved position in the data; the next :meth:`train_dataloader` resumes from it."""
        if "sampler" in state_dict:
            self._pending_state = state_dict["sampler"]
