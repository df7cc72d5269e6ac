"""What each method trains on: the prompt and answer tokens an SFT model is trained on (and a
head for the generate runner reads), which must be exactly what the classifier sends and reads,
in either prompt layout (``chat``, ``compact``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar

import pytest

from langchain_qwen_fast import QwenClassifier
from langchain_qwen_fast._core.prompting import (
    CACHE_BLOCK_TOKENS,
    COMPACT_SUFFIX,
    LAYOUTS,
    PROMPT_SUFFIX,
    LabelSet,
    PromptLayout,
    local_plan,
)
from langchain_qwen_fast.errors import ConfigurationError
from langchain_qwen_fast.training import TrainOptions
from tests.support.fake_vllm import FakeVLLM, ToyTokenizer, toy_detokenize, toy_tokenize


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread() -> Iterator[None]:
    """Torch on one thread for these toy models: its worker threads wait for each other by
    spinning, and on a busy machine (CI's two cores, shared) that made a millisecond's step
    take seconds; one thread computes the same."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


#: embedding rows of the models trained and run here: more than the tokens the tests use
DENSE_VOCAB = 4096


class DenseToyTokenizer(ToyTokenizer):
    """The toy tokenizer with its ids renumbered 0, 1, 2… in order of first use (shared by every
    instance): the same tokens and texts, so a model over them needs a few thousand embedding rows,
    not the toy ids' million (building and training such a model was most of these tests' time).
    For the tests that run a model alone; those comparing ids with the fake server's keep the toy's."""

    _dense: ClassVar[dict[int, int]] = {}
    _toy: ClassVar[list[int]] = []

    def _renumbered(self, ids: list[int]) -> list[int]:
        for toy in ids:
            if toy not in self._dense:
                self._dense[toy] = len(self._toy)
                self._toy.append(toy)
        assert len(self._toy) <= DENSE_VOCAB
        return [self._dense[toy] for toy in ids]

    def encode_batch(self, texts: list[str], add_special_tokens: bool = True) -> list[Any]:
        return [self.Encoding(self._renumbered(toy_tokenize(t))) for t in texts]

    def decode(self, ids: list[int]) -> str:
        return toy_detokenize([self._toy[i] for i in ids])

    def token_to_id(self, token: str) -> int:
        (only,) = self._renumbered(toy_tokenize(token))
        return only


#: each layout's end of a text: what asks for a single-label answer
SUFFIX = {"chat": PROMPT_SUFFIX, "compact": COMPACT_SUFFIX}
layouts = pytest.mark.parametrize("layout", LAYOUTS)


def _served(labels: list[str], layout: PromptLayout, multi_label: bool = False) -> Any:
    """The plan the classifier learns from a server of the toy tokenizer (the fake vLLM)."""
    return QwenClassifier(labels=labels, multi_label=multi_label, prompt_layout=layout,
                          base_url="http://vllm.test/v1", http_transport=FakeVLLM().transport).prepare()  # fmt: skip


def _sft(labels: list[str], layout: PromptLayout, multi_label: bool = False, **options: Any) -> Any:
    import torch

    from langchain_qwen_fast.training.tasks import SFTTask

    settings = TrainOptions(method="sft", base_model="m", out="o", prompt_layout=layout, **options)
    return SFTTask(settings, labels, ToyTokenizer(), torch, multi_label)


@layouts
def test_sft_prompt_is_the_classifiers_prompt_and_targets_the_first_label_token(layout: PromptLayout) -> None:
    labels = ["World", "Sports", "Business"]
    task = _sft(labels, layout)
    plan, served = task.plan, _served(labels, layout)
    assert plan.scoring == served.scoring == "label_tokens"
    assert plan.head == served.head and [s.tail for s in plan.steps] == [s.tail for s in served.steps]
    (ids,) = task.encode(["Stocks rally"])
    assert ids == toy_tokenize(served.render("Stocks rally")) == toy_tokenize(plan.render("Stocks rally"))
    assert plan.render("Stocks rally").endswith("Stocks rally" + SUFFIX[layout])
    assert [plan.answer_tokens(i) for i in range(3)] == [(toy_tokenize(x)[0],) for x in ("World", "Sports", "Business")]
    if layout == "compact":  # the fixed part fills whole cache blocks, and the text follows it at once
        assert len(plan.head_ids) % CACHE_BLOCK_TOKENS == 0 and plan.head.endswith("<|endoftext|>")
        assert ids == [*plan.head_ids, *toy_tokenize("Stocks rally"), toy_tokenize(COMPACT_SUFFIX)[0]]


@layouts
def test_a_text_is_cut_to_its_token_limit_in_either_layout(layout: PromptLayout) -> None:
    task = _sft(["World", "Sports"], layout, max_text_tokens=4)
    long = " ".join(f"w{i}" for i in range(20))  # 39 toy tokens: words and the spaces between
    (prompt,) = task.encode([long])
    opening = toy_tokenize(task.plan.label_set.body_open)
    assert prompt == task.plan.prompt_ids([*opening, *toy_tokenize(long)[:4]], 0)  # the first 4 of its tokens
    assert len(opening) == (3 if layout == "chat" else 0)


@layouts
def test_labels_sharing_tokens_train_on_every_label_token_and_the_end(layout: PromptLayout) -> None:
    tokenizer = ToyTokenizer()
    plan = local_plan(LabelSet.build(["tech", "tech news", "sport"], layout=layout), tokenizer)
    served = _served(["tech", "tech news", "sport"], layout)
    assert plan.scoring == served.scoring == "label_sequences"
    assert [(s.tail, s.path, s.path_text) for s in plan.steps] == [(s.tail, s.path, s.path_text) for s in served.steps]
    assert plan.encode(["Stocks rally"], 1) == [toy_tokenize(served.render("Stocks rally", 1))]
    end = toy_tokenize("<|im_end|>")[0]
    assert plan.answer_tokens(0) == (*toy_tokenize("tech"), end)  # another label continues it
    assert plan.answer_tokens(1) == tuple(toy_tokenize("tech news"))
    assert plan.answer_tokens(2) == tuple(toy_tokenize("sport"))
    with pytest.raises(ValueError, match="single-label"):
        local_plan(LabelSet.build(["a", "b"], multi_label=True), tokenizer)


@layouts
def test_a_head_for_the_generate_runner_needs_labels_with_distinct_first_tokens(layout: PromptLayout) -> None:
    import torch

    from langchain_qwen_fast.training.tasks import HeadTask

    options = TrainOptions(method="head", base_model="m", out="o", export="generate", prompt_layout=layout)
    with pytest.raises(ConfigurationError, match="first tokens differ"):
        HeadTask(options, ["tech", "tech news"], ToyTokenizer(), torch)
    task = HeadTask(options, ["World", "Sports"], ToyTokenizer(), torch)
    served = _served(["World", "Sports"], layout)
    assert task.encode(["Stocks rally"]) == [toy_tokenize(served.render("Stocks rally"))]  # the classifier's prompt


def test_a_head_served_through_classify_reads_the_bare_text_and_has_no_layout() -> None:
    import torch

    from langchain_qwen_fast.training.tasks import HeadTask

    task = HeadTask(TrainOptions(method="head", base_model="m", out="o"), ["World", "Sports"], ToyTokenizer(), torch)
    assert task.plan is None and task.encode(["Stocks rally"]) == [toy_tokenize("Stocks rally")]
    with pytest.raises(ConfigurationError, match="reads the bare text"):
        HeadTask(TrainOptions(method="head", base_model="m", out="o", prompt_layout="compact"), ["World", "Sports"],
                 ToyTokenizer(), torch)  # fmt: skip


def test_a_base_model_that_is_neither_a_directory_nor_a_hub_id_is_named() -> None:
    from langchain_qwen_fast.training.tasks import load_tokenizer

    with pytest.raises(ConfigurationError, match=r"no tokenizer\.json"):
        load_tokenizer("/nonexistent/model")


@layouts
def test_multi_label_sft_trains_the_classifiers_yes_no_prompt_of_every_label(layout: PromptLayout) -> None:
    from langchain_qwen_fast.training.tasks import local_yes_no_plan

    labels = ["World", "Sports", "Sci/Tech"]
    served = _served(labels, layout, multi_label=True)
    plan = local_yes_no_plan(LabelSet.build(labels, multi_label=True, layout=layout), ToyTokenizer())
    assert (plan.scoring, plan.head) == (served.scoring, served.head) == ("yes_no", served.head)
    assert [(s.tail, s.allowed) for s in plan.steps] == [(s.tail, s.allowed) for s in served.steps]
    assert plan.answer_token_ids == (toy_tokenize("yes")[0], toy_tokenize("no")[0])
    if layout == "compact":
        assert len(plan.head_ids) % CACHE_BLOCK_TOKENS == 0 and served.render("x", 2).endswith("x<|im_end|>Sci/Tech?")
    task = _sft(labels, layout, multi_label=True)
    (body,) = task.encode(["Stocks rally"])
    prompts = [task.plan.prompt_ids(body, k) for k in range(len(labels))]
    assert prompts == [toy_tokenize(served.render("Stocks rally", k)) for k in range(len(labels))]
    assert task.label_rows([(0, 2), ()]).tolist() == [[1.0, 0.0, 1.0], [0.0, 0.0, 0.0]]
    with pytest.raises(ConfigurationError, match="multi-label"):
        local_yes_no_plan(LabelSet.build(labels), ToyTokenizer())


def test_a_multi_label_head_for_the_generate_runner_is_refused() -> None:
    import torch

    from langchain_qwen_fast.training.tasks import HeadTask

    options = TrainOptions(method="head", base_model="m", out="o", export="generate")
    with pytest.raises(ConfigurationError, match="/classify"):
        HeadTask(options, ["World", "Sports"], ToyTokenizer(), torch, True)


@layouts
def test_single_label_sft_loss_is_the_cross_entropy_over_the_labels_tokens_alone(layout: PromptLayout) -> None:
    """The classifier renormalises the labels' first-token probabilities, so that is what SFT
    trains: the loss equals the cross-entropy over those tokens' logits after each whole prompt
    (run alone, as the server runs it; the training pass shares the prompts' head), and a token
    no label starts with, however likely, takes no part in it."""
    import torch

    from langchain_qwen_fast.training.tasks import SFTTask

    task = SFTTask(TrainOptions(method="sft", base_model="m", out="o", prompt_layout=layout),
                   ["World", "Sports", "Business"], DenseToyTokenizer(), torch)  # fmt: skip
    model = _toy_qwen3()
    encoded = task.encode(["Stocks rally", "Cup final tonight in the rain"])
    assert len({len(e) for e in encoded}) == 2  # one padded
    targets = [2, 1]
    loss = task.loss(model, encoded, targets).item()
    tokens = list(task.plan.answer_token_ids)
    last = torch.stack([model(input_ids=torch.tensor([ids]), logits_to_keep=1).logits[0, -1] for ids in encoded])
    expected = torch.nn.functional.cross_entropy(last[:, tokens], torch.tensor(targets))
    assert loss == pytest.approx(expected.item(), rel=1e-5)
    other = next(i for i in range(1_000, 2_000) if i not in tokens)
    with torch.no_grad():  # far the likeliest token after the first prompt, and no label's
        model.lm_head.weight[other] += 100 * model.lm_head.weight[last[0].argmax()]
    assert int(model(input_ids=torch.tensor([encoded[0]]), logits_to_keep=1).logits[0, -1].argmax()) == other
    assert task.loss(model, encoded, targets).item() == pytest.approx(loss, rel=1e-6)


def _toy_qwen3() -> Any:
    """A random Qwen3 causal LM small enough for a unit test, over :class:`DenseToyTokenizer`'s ids."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(vocab_size=DENSE_VOCAB, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=8, pad_token_id=1000,
                         initializer_range=0.3)  # fmt: skip
    torch.manual_seed(0)
    return Qwen3ForCausalLM(config)


@pytest.mark.parametrize(
    ("method", "multi_label", "tied"),
    [("sft", True, False), ("sft", False, True), ("head", False, False), ("head", True, False)],
    ids=["sft-multi-label-untied", "sft-single-label-tied", "head", "head-multi-label"],
)
def test_full_fine_tuning_of_the_touched_rows_alone_is_the_same_run(method: str, multi_label: bool, tied: bool) -> None:
    """Training only the vocabulary rows the data can move (as deltas) gives, step for step,
    the weights that training every row gives: the other rows' gradients are zero, so AdamW
    never moves them. Folded back, no delta is left over and the model is a plain one."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM, Qwen3ForSequenceClassification

    from langchain_qwen_fast.training.tasks import HeadTask, SFTTask

    config = Qwen3Config(vocab_size=DENSE_VOCAB, hidden_size=8, intermediate_size=16, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=4, tie_word_embeddings=tied,
                         pad_token_id=DenseToyTokenizer().token_to_id("<|endoftext|>"), num_labels=3,
                         problem_type="multi_label_classification" if multi_label else None)  # fmt: skip
    options = TrainOptions(method=method, base_model="m", out="o", lora=False)  # type: ignore[arg-type]
    texts = ["Stocks rally", "Cup final tonight", "New chip ships"]
    targets: list[Any] = [(0, 2), (1,), ()] if multi_label else [2, 1, 0]
    weights = []
    for touched in (False, True):
        torch.manual_seed(0)
        task = (SFTTask if method == "sft" else HeadTask)(options, ["World", "Sports", "Business"],
                                                          DenseToyTokenizer(), torch, multi_label)  # fmt: skip
        model = (Qwen3ForCausalLM if method == "sft" else Qwen3ForSequenceClassification)(config)
        start = model.get_input_embeddings().weight.detach().clone()
        encoded = task.encode(texts)
        if touched:
            task.prepare(model, encoded)
            assert task.rows is not None
        trainable = [p for p in model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(trainable, lr=1e-2, weight_decay=0.0)
        for step in range(3):
            batch = [step % 3, (step + 1) % 3]
            task.loss(model, [encoded[i] for i in batch], [targets[i] for i in batch]).backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        task.finish(model)
        assert not hasattr(model, "touched_rows") and task.rows is None
        assert all(p.requires_grad for p in model.parameters())
        weights.append({k: v.detach().clone() for k, v in model.state_dict().items()})
    plain, touched_only = weights
    assert plain.keys() == touched_only.keys()
    moved = (plain["model.embed_tokens.weight"] != start).any(dim=1)
    assert 0 < int(moved.sum()) < 100  # the run trained the rows of its few tokens, and only those
    for name in plain:
        assert torch.allclose(plain[name], touched_only[name], atol=1e-6), name


@layouts
def test_multi_label_sft_reads_every_labels_question_in_one_pass_as_its_own_prompt(layout: PromptLayout) -> None:
    """One pass per text reads every label's question as a branch after the shared text: each
    label's P(yes), and its gradient, equal those of the label's own whole prompt run
    alone, as the server runs it."""
    import torch

    from langchain_qwen_fast.training.tasks import SFTTask

    model = _toy_qwen3()
    options = TrainOptions(method="sft", base_model="m", out="o", lora=False, prompt_layout=layout)
    task = SFTTask(options, ["World", "Sports", "Business"], DenseToyTokenizer(), torch, True)
    bodies = task.encode(["Stocks rally", "Cup final tonight in the rain, again and again", "New chip ships today"])
    assert len({len(b) for b in bodies}) == 3  # padded stems of different lengths
    branched = task.probabilities(model, bodies)
    yes, no = task.plan.answer_token_ids
    prompts = [task.plan.prompt_ids(body, k) for body in bodies for k in range(3)]  # as the server runs them
    alone = torch.stack([model(input_ids=torch.tensor([p]), logits_to_keep=1).logits[0, -1] for p in prompts])
    margins = (alone[:, yes] - alone[:, no]).reshape(3, 3)
    expected = torch.sigmoid(margins)  # P(yes) / (P(yes) + P(no)), what the classifier reads
    assert torch.allclose(branched, expected, atol=2e-6)
    assert (margins - margins.mean()).abs().max() > 1e-2  # labels and texts tell apart here
    weight = model.model.layers[0].self_attn.q_proj.weight
    (branched_grad,) = torch.autograd.grad(branched.sum(), weight)
    (expected_grad,) = torch.autograd.grad(expected.sum(), weight)
    assert torch.allclose(branched_grad, expected_grad, atol=1e-5)
