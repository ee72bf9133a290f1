"""Fetch a kelp /metrics page and parse it with Prometheus' own Python
client (its strict OpenMetrics parser), for kelp/tests/metrics.rs.

Usage: metrics_page.py URL

Prints one JSON object: the response's content type, and each family's
type and samples ({"name", "labels", "value"}). A page the parser refuses
exits non-zero with the parser's error on stderr.
"""

import json
import sys
import urllib.request

from prometheus_client.openmetrics.parser import text_string_to_metric_families


def main():
    url = sys.argv[1]
    with urllib.request.urlopen(url, timeout=10) as response:
        content_type = response.headers.get("Content-Type", "")
        page = response.read().decode("utf-8")
    families = {}
    for family in text_string_to_metric_families(page):
        families[family.name] = {
            "type": family.type,
            "samples": [
                {"name": s.name, "labels": s.labels, "value": s.value}
                for s in family.samples
            ],
        }
    json.dump({"content_type": content_type, "families": families}, sys.stdout)
    print()


if __name__ == "__main__":
    main()
