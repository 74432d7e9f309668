from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Method(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    METHOD_UNSPECIFIED: _ClassVar[Method]
    METHOD_SPECSTEER: _ClassVar[Method]
    METHOD_SD: _ClassVar[Method]
    METHOD_FUSION: _ClassVar[Method]
    METHOD_LLM: _ClassVar[Method]

class CandidatePolicy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CANDIDATE_POLICY_UNSPECIFIED: _ClassVar[CandidatePolicy]
    CANDIDATE_POLICY_GUARDRAIL: _ClassVar[CandidatePolicy]
    CANDIDATE_POLICY_LITERAL: _ClassVar[CandidatePolicy]
METHOD_UNSPECIFIED: Method
METHOD_SPECSTEER: Method
METHOD_SD: Method
METHOD_FUSION: Method
METHOD_LLM: Method
CANDIDATE_POLICY_UNSPECIFIED: CandidatePolicy
CANDIDATE_POLICY_GUARDRAIL: CandidatePolicy
CANDIDATE_POLICY_LITERAL: CandidatePolicy

class SessionParams(_message.Message):
    __slots__ = ("method", "sampling", "gamma_ppm", "gamma_infinite", "alpha_milli", "top_k", "draft_len", "policy", "bonus", "adapter_version", "padded_frames", "certainty_ppm", "gamma_uncertain_ppm", "gamma_form_ppm")
    METHOD_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_FIELD_NUMBER: _ClassVar[int]
    GAMMA_PPM_FIELD_NUMBER: _ClassVar[int]
    GAMMA_INFINITE_FIELD_NUMBER: _ClassVar[int]
    ALPHA_MILLI_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    DRAFT_LEN_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    BONUS_FIELD_NUMBER: _ClassVar[int]
    ADAPTER_VERSION_FIELD_NUMBER: _ClassVar[int]
    PADDED_FRAMES_FIELD_NUMBER: _ClassVar[int]
    CERTAINTY_PPM_FIELD_NUMBER: _ClassVar[int]
    GAMMA_UNCERTAIN_PPM_FIELD_NUMBER: _ClassVar[int]
    GAMMA_FORM_PPM_FIELD_NUMBER: _ClassVar[int]
    method: Method
    sampling: bool
    gamma_ppm: int
    gamma_infinite: bool
    alpha_milli: int
    top_k: int
    draft_len: int
    policy: CandidatePolicy
    bonus: bool
    adapter_version: int
    padded_frames: bool
    certainty_ppm: int
    gamma_uncertain_ppm: int
    gamma_form_ppm: int
    def __init__(self, method: _Optional[_Union[Method, str]] = ..., sampling: _Optional[bool] = ..., gamma_ppm: _Optional[int] = ..., gamma_infinite: _Optional[bool] = ..., alpha_milli: _Optional[int] = ..., top_k: _Optional[int] = ..., draft_len: _Optional[int] = ..., policy: _Optional[_Union[CandidatePolicy, str]] = ..., bonus: _Optional[bool] = ..., adapter_version: _Optional[int] = ..., padded_frames: _Optional[bool] = ..., certainty_ppm: _Optional[int] = ..., gamma_uncertain_ppm: _Optional[int] = ..., gamma_form_ppm: _Optional[int] = ...) -> None: ...

class Open(_message.Message):
    __slots__ = ("prompt_ids", "params", "resume_ids")
    PROMPT_IDS_FIELD_NUMBER: _ClassVar[int]
    PARAMS_FIELD_NUMBER: _ClassVar[int]
    RESUME_IDS_FIELD_NUMBER: _ClassVar[int]
    prompt_ids: _containers.RepeatedScalarFieldContainer[int]
    params: SessionParams
    resume_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, prompt_ids: _Optional[_Iterable[int]] = ..., params: _Optional[_Union[SessionParams, _Mapping]] = ..., resume_ids: _Optional[_Iterable[int]] = ...) -> None: ...

class Round(_message.Message):
    __slots__ = ("seq", "commit_ids", "draft_ids", "literal_ids")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    COMMIT_IDS_FIELD_NUMBER: _ClassVar[int]
    DRAFT_IDS_FIELD_NUMBER: _ClassVar[int]
    LITERAL_IDS_FIELD_NUMBER: _ClassVar[int]
    seq: int
    commit_ids: _containers.RepeatedScalarFieldContainer[int]
    draft_ids: _containers.RepeatedScalarFieldContainer[int]
    literal_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, seq: _Optional[int] = ..., commit_ids: _Optional[_Iterable[int]] = ..., draft_ids: _Optional[_Iterable[int]] = ..., literal_ids: _Optional[_Iterable[int]] = ...) -> None: ...

class PaddedRound(_message.Message):
    __slots__ = ("seq", "commit_ids", "draft_ids", "literal_ids")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    COMMIT_IDS_FIELD_NUMBER: _ClassVar[int]
    DRAFT_IDS_FIELD_NUMBER: _ClassVar[int]
    LITERAL_IDS_FIELD_NUMBER: _ClassVar[int]
    seq: int
    commit_ids: _containers.RepeatedScalarFieldContainer[int]
    draft_ids: _containers.RepeatedScalarFieldContainer[int]
    literal_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, seq: _Optional[int] = ..., commit_ids: _Optional[_Iterable[int]] = ..., draft_ids: _Optional[_Iterable[int]] = ..., literal_ids: _Optional[_Iterable[int]] = ...) -> None: ...

class WitnessRequest(_message.Message):
    __slots__ = ("origin", "log_key", "size", "root_hash", "signature", "old_size", "consistency_proof")
    ORIGIN_FIELD_NUMBER: _ClassVar[int]
    LOG_KEY_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    ROOT_HASH_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    OLD_SIZE_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_PROOF_FIELD_NUMBER: _ClassVar[int]
    origin: str
    log_key: bytes
    size: int
    root_hash: bytes
    signature: bytes
    old_size: int
    consistency_proof: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, origin: _Optional[str] = ..., log_key: _Optional[bytes] = ..., size: _Optional[int] = ..., root_hash: _Optional[bytes] = ..., signature: _Optional[bytes] = ..., old_size: _Optional[int] = ..., consistency_proof: _Optional[_Iterable[bytes]] = ...) -> None: ...

class Close(_message.Message):
    __slots__ = ("seq", "witness")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    WITNESS_FIELD_NUMBER: _ClassVar[int]
    seq: int
    witness: WitnessRequest
    def __init__(self, seq: _Optional[int] = ..., witness: _Optional[_Union[WitnessRequest, _Mapping]] = ...) -> None: ...

class Uplink(_message.Message):
    __slots__ = ("open", "round", "close", "padded_round")
    OPEN_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    CLOSE_FIELD_NUMBER: _ClassVar[int]
    PADDED_ROUND_FIELD_NUMBER: _ClassVar[int]
    open: Open
    round: Round
    close: Close
    padded_round: PaddedRound
    def __init__(self, open: _Optional[_Union[Open, _Mapping]] = ..., round: _Optional[_Union[Round, _Mapping]] = ..., close: _Optional[_Union[Close, _Mapping]] = ..., padded_round: _Optional[_Union[PaddedRound, _Mapping]] = ...) -> None: ...

class Candidate(_message.Message):
    __slots__ = ("token_ids", "value")
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    value: float
    def __init__(self, token_ids: _Optional[_Iterable[int]] = ..., value: _Optional[float] = ...) -> None: ...

class FusionVector(_message.Message):
    __slots__ = ("values",)
    VALUES_FIELD_NUMBER: _ClassVar[int]
    values: bytes
    def __init__(self, values: _Optional[bytes] = ...) -> None: ...

class Downlink(_message.Message):
    __slots__ = ("seq", "accepted", "candidates", "fusion", "cosignature")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    CANDIDATES_FIELD_NUMBER: _ClassVar[int]
    FUSION_FIELD_NUMBER: _ClassVar[int]
    COSIGNATURE_FIELD_NUMBER: _ClassVar[int]
    seq: int
    accepted: int
    candidates: _containers.RepeatedCompositeFieldContainer[Candidate]
    fusion: FusionVector
    cosignature: Cosignature
    def __init__(self, seq: _Optional[int] = ..., accepted: _Optional[int] = ..., candidates: _Optional[_Iterable[_Union[Candidate, _Mapping]]] = ..., fusion: _Optional[_Union[FusionVector, _Mapping]] = ..., cosignature: _Optional[_Union[Cosignature, _Mapping]] = ...) -> None: ...

class Cosignature(_message.Message):
    __slots__ = ("witness", "signature")
    WITNESS_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    witness: str
    signature: bytes
    def __init__(self, witness: _Optional[str] = ..., signature: _Optional[bytes] = ...) -> None: ...
