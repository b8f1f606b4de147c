"""What lives elsewhere: HTTPReward (a client of the reward server's schema; the server is `python -m lit_rlhf.serve`),
LLMJudge (a generative judge, endpoint or local) and ServedTeacher (a distillation teacher behind an OpenAI-compatible
server). Their HTTP rules (timeouts, retries, auth) are HTTPService's (lit_rlhf.remote.http)."""

from lit_rlhf.remote.client import HTTPReward
from lit_rlhf.remote.judge import LLMJudge, LLMPairwiseJudge, parse_judgement, parse_verdict
from lit_rlhf.remote.schema import RewardServiceError
from lit_rlhf.remote.teacher import ServedTeacher, TeacherServiceError

__all__ = ["HTTPReward", "LLMJudge", "LLMPairwiseJudge", "RewardServiceError", "ServedTeacher", "TeacherServiceError",
           "parse_judgement", "parse_verdict"]
