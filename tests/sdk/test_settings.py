"""The Python API at the door: settings named as the CLI names them, and wrong types
refused as one `ConfigError` naming the setting, never a bare TypeError from deep inside."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import pytest

from specsteer.core.errors import ConfigError
from specsteer.core.session_types import CandidatePolicy, Method, SessionParams
from specsteer.sdk.client import ClientConfig, SpecSteerClient
from specsteer.sdk.decoding import DecodeOptions, Specialist, generate
from specsteer.sdk.transport import InProcessVerifier
from specsteer.sdk.uplink_guard import guard_for_profile
from specsteer.server.session import CloudVerifier
from tests.tinymodels import tiny_lm


@pytest.fixture(scope="module")
def models(char_tok):
    return tiny_lm(char_tok, seed=11, name="s"), tiny_lm(char_tok, seed=22, name="g")


@pytest.fixture
def client(models):
    s_lm, g_lm = models
    verifier = InProcessVerifier(CloudVerifier(g_lm, s_lm, seed=0).open, vocab_size=s_lm.vocab_size)
    with SpecSteerClient(Specialist(s_lm), verifier, options=DecodeOptions(max_new_tokens=6)) as c:
        yield c


def test_the_method_and_policy_may_be_named_as_the_cli_names_them(models, client) -> None:
    # Prepare: what the enums give.
    want = generate(Specialist(models[0]), "Hi", SessionParams(method=Method.SLM), DecodeOptions(max_new_tokens=6))
    # Execute / Assert
    assert client.generate("Hi", method="slm").token_ids == want.token_ids
    params = SessionParams(method="sd", policy="literal")  # type: ignore[arg-type]
    assert params.method is Method.SD and params.policy is CandidatePolicy.LITERAL


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"method": "beam"}, "unknown method 'beam': choose one of slm, slm-rag, llm, sd, fusion, specsteer"),
        ({"method": 3}, "method must be a Method or one of slm, "),
        ({"policy": "best"}, "unknown policy 'best'"),
        ({"max_new_tokens": "5"}, "max_new_tokens must be a whole number (int); got str '5'"),
        ({"seed": 1.5}, "seed must be a whole number (int); got float 1.5"),
        ({"gamma": "0.5"}, "gamma must be a number (int or float); got str '0.5'"),
        ({"top_k": True}, "top_k must be a whole number (int); got bool True"),
        ({"sampling": 1}, "sampling must be True or False; got int 1"),
        ({"temperature": "hot"}, "temperature must be a number (int or float); got str 'hot'"),
        ({"gamma": math.nan}, "gamma must be 0, +inf, or in"),
        ({"alpha": math.inf}, "alpha must be in [0, 10]"),
        ({"temperature": math.inf}, "temperature must be a finite positive number; got inf"),
        ({"temperature": math.nan}, "temperature must be a finite positive number; got nan"),
    ],
)
def test_a_wrong_setting_is_one_config_error_naming_it(client, settings, message) -> None:
    for call in (client.generate, client.stream):
        with pytest.raises(ConfigError) as exc:
            call("Hi", **settings)
        assert message in str(exc.value)


def test_a_prompt_that_is_not_text_is_refused(client) -> None:
    for prompt in (None, b"Hi", 3):
        with pytest.raises(ConfigError, match=f"the prompt must be a string; got {type(prompt).__name__}"):
            client.generate(prompt)  # type: ignore[arg-type]
        with pytest.raises(ConfigError, match="the prompt must be a string"):
            client.stream(prompt)  # type: ignore[arg-type]


def test_session_params_check_their_types_themselves() -> None:
    with pytest.raises(ConfigError, match="draft_len must be a whole number"):
        SessionParams(draft_len="4")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="bonus must be True or False"):
        SessionParams(bonus="yes")  # type: ignore[arg-type]
    # An int is a number; math.inf is a documented gamma (reject every draft).
    assert SessionParams(gamma=1, alpha=0).gamma == 1 and SessionParams(gamma=math.inf).gamma == math.inf


@pytest.mark.parametrize("timeout", [0, -1.0, math.inf, math.nan, "10", True])
def test_a_client_config_refuses_a_timeout_that_is_no_positive_number(timeout) -> None:
    with pytest.raises(ConfigError, match="round_timeout must be a positive number of seconds"):
        ClientConfig(server="h:1", pins=Path("p"), cert=Path("c"), key=Path("k"), round_timeout=timeout)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_new_tokens": "5"}, "max_new_tokens must be a whole number (int); got str '5'"),
        ({"seed": None}, "seed must be a whole number (int); got NoneType None"),
        ({"temperature": math.inf}, "temperature must be a finite positive number; got inf"),
    ],
)
def test_decode_options_built_directly_refuse_wrong_types_as_a_config_error(options, message) -> None:
    with pytest.raises(ConfigError) as exc:
        DecodeOptions(**options)
    assert message in str(exc.value)


def test_every_way_to_build_a_client_guards_the_uplink_unless_told_off(models) -> None:
    s_lm, g_lm = models
    verifier = InProcessVerifier(CloudVerifier(g_lm, s_lm, seed=0).open, vocab_size=s_lm.vocab_size)
    # The constructor and in_process guard by default, as connect() does.
    assert SpecSteerClient(Specialist(s_lm), verifier).guard is not None
    with SpecSteerClient.in_process(s_lm, g_lm) as local:
        assert local.guard is not None
    # Off only when said in so many words; None is no way to say it.
    assert SpecSteerClient(Specialist(s_lm), verifier, guard="off").guard is None
    with pytest.raises(ConfigError, match="guard must be an EgressGuard or one of"):
        SpecSteerClient(Specialist(s_lm), verifier, guard=None)  # type: ignore[arg-type]


def _declared_padding(client: SpecSteerClient, **overrides: object) -> bool:
    """Generate once; whether the session the client opened declared padded frames (in-process,
    the transport then encodes every round as a PaddedRound of K slots)."""
    verifier = client.verifier
    assert isinstance(verifier, InProcessVerifier)
    opened = []
    real_open = verifier.open

    def spying_open(prompt_ids: Any, params: SessionParams) -> Any:
        session = real_open(prompt_ids, params)
        opened.append(session.pad_to)
        return session

    verifier.open = spying_open  # type: ignore[method-assign]
    client.generate("refs: speed", gamma=0.05, max_new_tokens=8, **overrides)  # type: ignore[arg-type]
    (pad_to,) = opened
    return pad_to is not None


def test_every_way_to_build_a_client_pads_its_rounds_unless_told_not_to(models) -> None:
    """A round's size would show where the guard held tokens back: constant-size rounds by default."""
    s_lm, g_lm = models

    def fresh(**kwargs: object) -> SpecSteerClient:
        verifier = InProcessVerifier(CloudVerifier(g_lm, s_lm, seed=0).open, vocab_size=s_lm.vocab_size)
        return SpecSteerClient(Specialist(s_lm), verifier, **kwargs)  # type: ignore[arg-type]

    assert _declared_padding(fresh())
    # A SessionParams built with the dataclass's wire default does not undo the client's choice.
    assert _declared_padding(fresh(params=SessionParams(gamma=0.05)))
    assert not _declared_padding(fresh(padded_frames=False))
    assert not _declared_padding(fresh(), padded_frames=False)  # one generation, said in so many words
    with SpecSteerClient.in_process(s_lm, g_lm) as local:
        assert local.padded_frames is True
    assert ClientConfig(server="h:1", pins=Path("p"), cert=Path("c"), key=Path("k")).padded_frames is True
    with pytest.raises(ConfigError, match="padded_frames must be"):
        fresh(padded_frames="yes")


def test_a_held_span_goes_up_as_one_label_for_every_kind_unless_told_by_kind(models) -> None:
    """The label would tell the cloud what kind of private text was held (an email, a key...)."""
    s_lm, g_lm = models
    verifier = InProcessVerifier(CloudVerifier(g_lm, s_lm, seed=0).open, vocab_size=s_lm.vocab_size)
    tok = s_lm.tokenizer

    def sent_as(client: SpecSteerClient, kind: str) -> str:
        assert client.guard is not None
        return str(tok.decode(client.guard.placeholder_ids(kind, tok)))

    generic = SpecSteerClient(Specialist(s_lm), verifier)
    assert {sent_as(generic, k) for k in ("email", "phone", "canary", "secret")} == {"<PRIVATE>"}
    by_kind = SpecSteerClient(Specialist(s_lm), verifier, placeholder_labels="by-kind")
    assert [sent_as(by_kind, k) for k in ("email", "phone")] == ["<EMAIL>", "<PHONE>"]
    with pytest.raises(ConfigError, match="placeholder labels are one of generic, by-kind"):
        SpecSteerClient(Specialist(s_lm), verifier, placeholder_labels="none")


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("fallback", "false", "fallback must be True or False; got str 'false'"),  # would have kept it on
        ("server", 123, "server must be a non-empty string; got int 123"),
        ("server_name", 5, "server_name must be a non-empty string"),
        ("pins", "pins\0.txt", "pins must be a file path"),
        ("cert", 7, "cert must be a file path"),
    ],
)
def test_a_client_config_built_in_code_checks_every_fields_type(field: str, value: object, message: str) -> None:
    base: dict[str, object] = {"server": "h:1", "pins": Path("p"), "cert": Path("c"), "key": Path("k")}
    with pytest.raises(ConfigError, match=re.escape(message)):
        ClientConfig(**{**base, field: value})  # type: ignore[arg-type]


def test_a_built_guard_whose_labels_are_not_the_clients_is_refused(models) -> None:
    """A built guard's by-kind labels went up where the client was told generic (the default)."""
    s_lm, g_lm = models
    verifier = InProcessVerifier(CloudVerifier(g_lm, s_lm, seed=0).open, vocab_size=s_lm.vocab_size)
    by_kind = guard_for_profile(None, s_lm.tokenizer, "placeholder", labels="by-kind")
    with pytest.raises(ConfigError, match="build it with labels='generic'"):
        SpecSteerClient(Specialist(s_lm), verifier, guard=by_kind)
    assert SpecSteerClient(Specialist(s_lm), verifier, guard=by_kind, placeholder_labels="by-kind").guard is by_kind
    generic = guard_for_profile(None, s_lm.tokenizer, "placeholder", labels="generic")
    assert SpecSteerClient(Specialist(s_lm), verifier, guard=generic).guard is generic
