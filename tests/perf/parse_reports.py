"""Report parsing rate (the allocator parses every report of a batch): 300 reports of 40 addresses.

.venv/bin/python tests/perf/parse_reports.py
"""

import json
import statistics
import time

from warmpool.messages import parse_report
from warmpool_cli.sample_plan import sample_cluster

reports: list[str] = []
for i, (report, _inv) in enumerate(sample_cluster(300, seed=3)):
    d = json.loads(report.to_json())
    d["enis"][0]["ips"] = [f"10.{i // 250}.{i % 250}.{k + 10}" for k in range(9)]
    d["enis"].append(
        {
            **d["enis"][0],
            "eni_id": f"eni-1{i:07d}",
            "device_index": 1,
            "primary_ip": f"10.9.{i % 250}.{i // 250 + 1}",
            "ips": [f"10.8.{i % 250}.{k + 10}" for k in range(29)],
        }
    )
    reports.append(json.dumps(d))
rates = []
for _ in range(5):
    t = time.perf_counter()
    for raw in reports:
        parse_report(raw)
    rates.append(len(reports) / (time.perf_counter() - t))
print(f"parse_report: median {statistics.median(rates):,.0f} reports/s, 5 runs of {len(reports)} reports")
