#!/usr/bin/env python3
"""Writes the protobuf seeds from the OTLP/JSON seeds (the ones protobuf's own JSON mapping
accepts: hex ids are turned into base64 first). Run from fuzz/seeds after changing them."""
import base64, json, pathlib, re
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

def ids_to_base64(v):
    if isinstance(v, dict):
        return {k: (base64.b64encode(bytes.fromhex(x)).decode()
                    if k in ("traceId", "spanId", "parentSpanId") and isinstance(x, str)
                    and re.fullmatch(r"[0-9a-f]+", x) else ids_to_base64(x))
                for k, x in v.items()}
    if isinstance(v, list):
        return [ids_to_base64(x) for x in v]
    return v

for src, dst, msg in [("otlp_traces_json", "otlp_traces_proto", ExportTraceServiceRequest),
                      ("otlp_logs_json", "otlp_logs_proto", ExportLogsServiceRequest)]:
    for f in sorted(pathlib.Path(src).iterdir()):
        try:
            doc = ids_to_base64(json.loads(f.read_text()))
            m = json_format.ParseDict(doc, msg(), ignore_unknown_fields=True)
        except Exception as e:  # the JSON seeds include deliberately odd documents
            print(f"skip {f}: {e}")
            continue
        out = pathlib.Path(dst) / (f.stem + ".pb")
        out.write_bytes(m.SerializeToString())
        print(f"{out}: {out.stat().st_size} bytes")
