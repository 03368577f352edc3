"""reckon's conformance kit: real agent frameworks, end to end.

For each framework, a small agent (kit/python/agents/, kit/js/) with the framework's own fake or
test model and its ordinary OpenTelemetry setup exports to a real `reckon serve` (RECKON_BIN, free
loopback ports, a temporary SQLite store, the repository's contracts/ plus kit/contracts/). Each
agent is run once with three intents; the tool `issue_refund` "calls the payment API", simulated
inside the tool, and annotates its span:

- success: the API answered 200 with refund object `re_...` `succeeded` (and the payment
  service's record of it, with the same amount, arrives through the records API);
- timeout: no answer (`error.type = timeout`);
- wrong_amount: the API answered 200 and `succeeded`, but the payment service's record of the
  refund says another amount.

Then the verdicts, read from `GET /api/v1/intents/{id}`:

- success: `completed` / `none`, no findings, one `succeeded` attempt with the key;
- timeout: `unknown` / `wait` at once (the contract's `max_in_flight`: the request may still
  commit for 60 s), then `unknown` / `retry_same_key` with the key, inside the key's retention
  window (`test_timeouts_become_retry_same_key`, which waits for the contract's 60 s to pass);
- wrong_amount: `unknown` / `escalate` with `effect_mismatch`, which needs the tool's
  arguments on the span (content capture on).

Run it with `kit/run` (it makes the virtual environment and installs the JavaScript packages).
Directly: `RECKON_BIN=target/debug/reckon $VENV/bin/python -m pytest kit` with `KIT_JS` naming a
directory where `npm ci` ran (default kit/js).
"""
from __future__ import annotations

import calendar
import dataclasses
import json
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest

KIT = Path(__file__).resolve().parent
REPO = KIT.parent
AGENTS = KIT / "python" / "agents"
JS = Path(os.environ.get("KIT_JS", KIT / "js"))
NODE = os.environ.get("KIT_NODE", "node")
AGENT_TIMEOUT = float(os.environ.get("KIT_AGENT_TIMEOUT", "120"))
# refunds.toml: a sent refund can commit for 60 s; before that an unknown outcome means "wait".
MAX_IN_FLIGHT_S = 60
# The contract's key retention minus its retry margin (24 h - 1 h).
SAFE_RETRY_S = 23 * 3600

AMOUNT = "45.00"
WRONG_AMOUNT = "54.00"
CURRENCY = "usd"
SESSION = uuid.uuid4().hex[:8]
# Environment variables by which the frameworks and their instrumentations are configured.
FRAMEWORK_SWITCHES = ("OTEL_", "OPENINFERENCE_", "TRACELOOP_", "ADK_", "OPENAI_AGENTS_", "LOGFIRE_")


@dataclasses.dataclass(frozen=True)
class Framework:
    """One agent as a user of that framework would write it."""

    name: str
    # ("python" | "node", script, extra arguments...): the plan (JSON) goes in as argv[1].
    command: tuple[str, ...]
    tool: str = "issue_refund"
    # How the tool reports its outcome: "span" (reckon.* and the API's answer on the tool's own
    # span), or "arguments" (the span is out of reach: the intent id and key travel in the tool's
    # arguments, read by the contract's JSON pointers, and the outcome comes from the records).
    evidence: str = "span"
    scenarios: tuple[str, ...] = ("success", "timeout", "wrong_amount")
    # What the verdict must say about the span's content: "captured" (content capture on) or
    # "redacted" (the instrumentation wrote __REDACTED__).
    arguments: str = "captured"
    env: tuple[tuple[str, str], ...] = ()
    # (scenario, why): a check reckon is known to fail for this framework, kept as a strict
    # xfail so that the fix turns it into a failure to remove the marker (never a silent pass).
    gaps: tuple[tuple[str, str], ...] = ()

    def argv(self, plan: str) -> list[str]:
        head, *rest = self.command
        exe = {"python": sys.executable, "node": NODE}[head]
        script, *extra = rest
        base = AGENTS if head == "python" else JS
        return [exe, str(base / script), plan, *extra]

    def cwd(self) -> Path:
        return AGENTS if self.command[0] == "python" else JS


FRAMEWORKS = [
    Framework("pydantic-ai-2.68-format-5", ("python", "pydantic_ai_agent.py", "5")),
    Framework("pydantic-ai-2.68-format-2", ("python", "pydantic_ai_agent.py", "2")),
    Framework("openai-agents-0.24-openinference-2.6", ("python", "openai_agents_agent.py")),
    Framework("strands-1.62", ("python", "strands_agent.py")),
    # The latest GenAI conventions: the arguments in a `gen_ai.client.inference.operation.details`
    # event's messages and in `gen_ai.tool.call.arguments`, not in `gen_ai.tool.message`.
    Framework(
        "strands-1.62-latest-conventions",
        ("python", "strands_agent.py"),
        env=(("OTEL_SEMCONV_STABILITY_OPT_IN", "gen_ai_latest_experimental"),),
    ),
    Framework("langgraph-1.2-openinference-0.1.80", ("python", "langgraph_agent.py", "openinference")),
    Framework(
        "langgraph-1.2-openinference-0.1.80-arguments",
        ("python", "langgraph_agent.py", "openinference-arguments"),
        tool="refund_order",
        evidence="arguments",
    ),
    Framework("langgraph-1.2-openllmetry-0.62", ("python", "langgraph_agent.py", "openllmetry")),
    # ADK 2 puts the arguments on its (semconv) tool span only when the OpenTelemetry GenAI
    # content switch routes content to spans; its schema 1 (gcp.vertex.agent.*) does by default.
    Framework(
        "google-adk-2.13",
        ("python", "google_adk_agent.py"),
        env=(("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "SPAN_ONLY"),),
    ),
    Framework(
        "google-adk-2.13-schema-1",
        ("python", "google_adk_agent.py"),
        env=(("ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN", "1"),),
    ),
    Framework(
        "llama-index-0.14-openinference-4.6",
        ("python", "llama_index_agent.py"),
    ),
    Framework("ai-sdk-7.0", ("node", "ai7_agent.mjs")),
    Framework("ai-sdk-6.0", ("node", "ai6_agent.mjs")),
    # Content capture off: OpenInference writes __REDACTED__ for the tool's input. Success and
    # timeout still read right from the reckon.* attributes; parameter checks cannot run.
    Framework(
        "openai-agents-0.24-openinference-2.6-inputs-hidden",
        ("python", "openai_agents_agent.py"),
        scenarios=("success", "timeout"),
        arguments="redacted",
        env=(("OPENINFERENCE_HIDE_INPUTS", "true"),),
    ),
]
BY_NAME = {f.name: f for f in FRAMEWORKS}


def pairs(scenario: str) -> list:
    out = []
    for f in FRAMEWORKS:
        if scenario not in f.scenarios:
            continue
        gap = dict(f.gaps).get(scenario)
        marks = [pytest.mark.xfail(strict=True, reason=gap)] if gap else []
        out.append(pytest.param(f, id=f.name, marks=marks))
    return out


# ---------------------------------------------------------------------------------------------
# reckon


def free_port() -> int:
    """A loopback port free now, below the kernel's ephemeral range (32768-60999 on Linux). A
    port bind(0) handed out is back in that range once released, and the kernel may give it to
    any outgoing connection before the server it was meant for binds it (seen in CI: an
    Alertmanager's bind refused). A random port below the range is not handed out that way."""
    for _ in range(200):
        port = random.randrange(20000, 32000)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free loopback port in 20000-32000")


class Reckon:
    def __init__(self, binary: Path, work: Path) -> None:
        contracts = work / "contracts"
        contracts.mkdir()
        for f in [*sorted((REPO / "contracts").glob("*.toml")), *sorted((KIT / "contracts").glob("*.toml"))]:
            shutil.copy(f, contracts / f.name)
        self.http_port, grpc, api = free_port(), free_port(), free_port()
        self.otlp = f"http://127.0.0.1:{self.http_port}"
        self.api = f"http://127.0.0.1:{api}"
        self.log = work / "serve.log"
        self._log = open(self.log, "w")
        self.proc = subprocess.Popen(
            [
                str(binary), "serve",
                "--grpc-addr", f"127.0.0.1:{grpc}",
                "--http-addr", f"127.0.0.1:{self.http_port}",
                "--api-addr", f"127.0.0.1:{api}",
                "--data-dir", str(work / "data"),
                "--contracts", str(contracts),
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 60
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"reckon serve exited with {self.proc.returncode}:\n{self.tail()}")
            try:
                with urllib.request.urlopen(self.api + "/readyz", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"reckon serve not ready within 60 s:\n{self.tail()}")
            time.sleep(0.1)

    def tail(self, n: int = 4000) -> str:
        self._log.flush()
        return self.log.read_text(errors="replace")[-n:]

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._log.close()

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(self.api + path, timeout=10) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def verdict(self, intent_id: str) -> dict:
        status, body = self.get(f"/api/v1/intents/{intent_id}")
        assert status == 200, f"GET /api/v1/intents/{intent_id}: {status} {body}"
        return json.loads(body)

    def post_records(self, records: list[dict]) -> None:
        req = urllib.request.Request(
            self.api + "/api/v1/records",
            data=json.dumps(records).encode(),
            headers={"content-type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(req, timeout=10) as r:
            answer = json.loads(r.read())
        assert answer["accepted"] == len(records) and not answer["rejected"], answer

    def dropped_no_intent(self) -> float:
        status, body = self.get("/metrics")
        assert status == 200
        m = re.search(r'^reckon_spans_dropped_total\{[^}]*reason="no_intent_id"[^}]*\}\s+(\S+)$', body, re.M)
        return float(m.group(1)) if m else 0.0


@pytest.fixture(scope="session")
def reckon():
    binary = Path(os.environ.get("RECKON_BIN", REPO / "target" / "debug" / "reckon"))
    if not binary.exists():
        pytest.fail(f"RECKON_BIN {binary} does not exist: cargo build --bin reckon")
    work = Path(tempfile.mkdtemp(prefix="reckon-kit."))
    server = Reckon(binary, work)
    yield server
    server.stop()
    shutil.rmtree(work, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# Running the agents


@dataclasses.dataclass
class Ran:
    framework: Framework
    runs: dict[str, dict]  # scenario -> run (the plan entry)
    output: str


_RAN: dict[str, Ran] = {}


def plan_for(f: Framework) -> dict[str, dict]:
    slug = re.sub(r"[^a-z0-9]+", "-", f.name.lower())
    runs = {}
    for i, scenario in enumerate(f.scenarios):
        ident = f"{slug}-{scenario}-{SESSION}"
        runs[scenario] = {
            "scenario": scenario,
            "intent_id": f"int-{ident}",
            "idempotency_key": f"key-{ident}",
            "order_id": str(1042 + i),
            "amount": AMOUNT,
            "currency": CURRENCY,
            "object_id": f"re_{slug.replace('-', '_')}_{scenario}_{SESSION}",
        }
    return runs


def record(run: dict, amount: str) -> dict:
    """The payment service's own record of the refund, as its webhook or reconciler reports it."""
    return {
        "kind": "refund",
        "object_id": run["object_id"],
        "intent_id": run["intent_id"],
        "idempotency_key": run["idempotency_key"],
        "status": "succeeded",
        "amount": amount,
        "currency": CURRENCY,
        "target": run["order_id"],
        "source": "kit-payment-service",
    }


def ran(reckon: Reckon, f: Framework, post_records: bool = True) -> Ran:
    """Runs the framework's agent once (all its scenarios), then the payment service's records."""
    if f.name in _RAN:
        return _RAN[f.name]
    runs = plan_for(f)
    # The frameworks' switches (content capture, conventions, exporters) come from the row alone,
    # never from the environment the kit happens to run in.
    inherited = {k: v for k, v in os.environ.items() if not k.startswith(FRAMEWORK_SWITCHES)}
    env = {**inherited, "OTEL_EXPORTER_OTLP_ENDPOINT": reckon.otlp, **dict(f.env)}
    try:
        p = subprocess.run(
            f.argv(json.dumps(list(runs.values()))),
            cwd=f.cwd(),
            env=env,
            capture_output=True,
            text=True,
            timeout=AGENT_TIMEOUT,
        )
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"{f.name}: the agent ran over {AGENT_TIMEOUT} s\n{e.stdout}\n{e.stderr}")
    output = f"$ {' '.join(p.args[:2])} ...\n{p.stdout}\n{p.stderr}"
    if p.returncode != 0:
        pytest.fail(f"{f.name}: the agent exited with {p.returncode}\n{output[-6000:]}")
    records = []
    for scenario, run in runs.items():
        if scenario == "wrong_amount":
            records.append(record(run, WRONG_AMOUNT))
        elif scenario == "success":
            records.append(record(run, AMOUNT))
    if records and post_records:
        reckon.post_records(records)
    _RAN[f.name] = Ran(f, runs, output)
    return _RAN[f.name]


def verdict_of(reckon: Reckon, r: Ran, scenario: str) -> dict:
    run = r.runs[scenario]
    # The export is acknowledged once durable and audited, and the agent flushed before exiting;
    # a short grace covers only the read path, never a wrong verdict.
    deadline = time.monotonic() + 5
    while True:
        status, body = reckon.get(f"/api/v1/intents/{run['intent_id']}")
        if status == 200 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert status == 200, (
        f"{r.framework.name}: reckon has no intent {run['intent_id']} ({status} {body}): the tool span "
        f"did not reach reckon, or named no intent.\n--- agent ---\n{r.output[-3000:]}\n--- reckon ---\n"
        f"{reckon.tail(2000)}"
    )
    return json.loads(body)


def explain(v: dict) -> str:
    return json.dumps(v, indent=1)[:3000]


def check_attempt(f: Framework, v: dict, run: dict, klass: str) -> dict:
    assert v["tool"] == f.tool, explain(v)
    assert v["idempotency_keys"] == [run["idempotency_key"]], explain(v)
    assert len(v["attempts"]) == 1, f"one tool call, one attempt:\n{explain(v)}"
    a = v["attempts"][0]
    assert a["idempotency_key"] == run["idempotency_key"], explain(v)
    assert a["class"] == klass, explain(v)
    return a


# ---------------------------------------------------------------------------------------------
# The checks


@pytest.mark.parametrize("f", pairs("success"))
def test_success(reckon, f):
    r = ran(reckon, f)
    run = r.runs["success"]
    v = verdict_of(reckon, r, "success")
    assert (v["state"], v["decision"]) == ("completed", "none"), explain(v)
    assert v["findings"] == [] and v["escalation_id"] is None, explain(v)
    if f.evidence == "span":
        a = check_attempt(f, v, run, "succeeded")
        assert (a["http_status"], a["object_id"], a["object_status"]) == (200, run["object_id"], "succeeded")
        assert a["reported_outcome"] == "succeeded", explain(v)
    else:
        # No response on the span: the attempt alone is unknown; the record settles it.
        check_attempt(f, v, run, "unknown")
    assert [o["object_id"] for o in v["objects"]] == [run["object_id"]], explain(v)


@pytest.mark.parametrize("f", pairs("timeout"))
def test_timeout_waits_while_the_request_may_commit(reckon, f):
    r = ran(reckon, f)
    run = r.runs["timeout"]
    v = verdict_of(reckon, r, "timeout")
    a = check_attempt(f, v, run, "unknown")
    if f.evidence == "span":
        assert a["error_type"] == "timeout" and a["http_status"] is None, explain(v)
        assert a["reported_outcome"] == "unknown", explain(v)
    assert v["objects"] == [] and v["findings"] == [], explain(v)
    assert v["state"] == "unknown", explain(v)
    # Within max_in_flight of the send the original may still commit: wait (unless the run was
    # slow enough that the window already passed).
    assert v["decision"] in ("wait", "retry_same_key"), explain(v)
    if v["decision"] == "wait":
        assert v.get("next_change"), f"a re-audit must be booked for the end of the window:\n{explain(v)}"


@pytest.mark.parametrize("f", pairs("success"))
def test_verdict_says_whether_arguments_were_captured(reckon, f):
    """Each attempt says what its span carried of the call's arguments: `captured` with content
    capture on, `redacted` where the instrumentation wrote __REDACTED__ (never compared)."""
    r = ran(reckon, f)
    for scenario in f.scenarios:
        v = verdict_of(reckon, r, scenario)
        got = [a.get("arguments") for a in v["attempts"]]
        assert got == [f.arguments], f"{scenario}: arguments {f.arguments} expected:\n{explain(v)}"


@pytest.mark.parametrize("f", pairs("wrong_amount"))
def test_wrong_amount(reckon, f):
    r = ran(reckon, f)
    run = r.runs["wrong_amount"]
    v = verdict_of(reckon, r, "wrong_amount")
    check_attempt(f, v, run, "succeeded" if f.evidence == "span" else "unknown")
    kinds = [x["kind"] for x in v["findings"]]
    assert "effect_mismatch" in kinds, (
        f"the refund recorded {WRONG_AMOUNT} for a call of {AMOUNT}: reckon must see the tool's "
        f"arguments on the span (content capture on) and compare them:\n{explain(v)}"
    )
    assert (v["state"], v["decision"]) == ("unknown", "escalate"), explain(v)
    assert v["escalation_id"], explain(v)
    objs = {o["object_id"]: o for o in v["objects"]}
    assert run["object_id"] in objs, explain(v)


def test_langgraph_openinference_tool_span_is_not_the_active_span(reckon):
    """The trap the guide warns of: under OpenInference's LangChain instrumentation,
    `trace.get_current_span()` inside a tool is not the TOOL span, so reckon.* lands elsewhere.
    reckon must not invent an intent, and must count the contracted tool span it could not
    audit."""
    f = Framework(
        "langgraph-1.2-openinference-0.1.80-naive",
        ("python", "langgraph_agent.py", "openinference-naive"),
        scenarios=("success",),
    )
    before = reckon.dropped_no_intent()
    r = ran(reckon, f, post_records=False)
    run = r.runs["success"]
    status, body = reckon.get(f"/api/v1/intents/{run['intent_id']}")
    assert status == 404, f"an attempt from a span that was not the tool's: {status} {body}"
    assert reckon.dropped_no_intent() >= before + 1, "the TOOL span without an intent id must be counted"


def test_timeouts_become_retry_same_key(reckon):
    """After the contract's max_in_flight the timed-out refunds are safe to retry with the same
    key (Stripe v1 replays it for 24 h): `retry_same_key`, booked by reckon itself, not polled."""
    timed_out = [(f, ran(reckon, f)) for f in FRAMEWORKS if "timeout" in f.scenarios]
    verdicts = {f.name: verdict_of(reckon, r, "timeout") for f, r in timed_out}
    starts = [_unix(a["start"]) for v in verdicts.values() for a in v["attempts"]]
    due = max(starts) + MAX_IN_FLIGHT_S + 1.5
    wait = due - time.time()
    assert wait < MAX_IN_FLIGHT_S + 30, f"clock skew? waiting {wait:.0f} s"
    if wait > 0:
        time.sleep(wait)
    failures = []
    for f, r in timed_out:
        v = verdict_of(reckon, r, "timeout")
        run = r.runs["timeout"]
        ok = (
            (v["state"], v["decision"]) == ("unknown", "retry_same_key")
            and v["idempotency_keys"] == [run["idempotency_key"]]
            and v["findings"] == []
            and v["safe_retry_until"]
            and _unix(v["safe_retry_until"]) - _unix(v["attempts"][0]["start"]) == pytest.approx(SAFE_RETRY_S, abs=1)
            and _unix(v["safe_retry_until"]) > time.time()
        )
        if not ok:
            failures.append(f"{f.name}:\n{explain(v)}")
    assert not failures, "\n".join(failures)


def _unix(rfc3339: str) -> float:
    """RFC 3339 with nanoseconds and Z, as reckon writes it, to unix seconds."""
    m = re.fullmatch(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?Z", rfc3339)
    assert m, rfc3339
    base = calendar.timegm(time.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S"))
    return base + (float("0." + m.group(2)) if m.group(2) else 0.0)


def test_intent_id_in_baggage_leaves_the_agents_lookups_out(reckon):
    """The intent id in baggage, copied onto every span of the run (a baggage span processor):
    the lookup tool the agent calls before refunding carries it too, with nothing else of the
    executor's. No contract covers the lookup, so it is context: the intent has the refund as its
    one attempt and settles as `completed` with no finding, and an intent whose agent only
    looked (and found no refund was needed) is no intent at all, where it used to be an attempt
    of unknown outcome with a `no_idempotency_contract` escalation."""
    f = Framework(
        "pydantic-ai-2.68-baggage",
        ("python", "pydantic_ai_baggage_agent.py"),
        scenarios=("success",),
    )
    r = ran(reckon, f)
    run = r.runs["success"]
    v = verdict_of(reckon, r, "success")
    check_attempt(f, v, run, "succeeded")
    assert (v["state"], v["decision"]) == ("completed", "none"), explain(v)
    assert v["findings"] == [] and v["escalation_id"] is None, explain(v)
    status, body = reckon.get(f"/api/v1/intents/{run['intent_id']}-lookup-only")
    assert status == 404, f"the lookup alone made an intent: {status} {body}"
