// promql-names parses PromQL queries with Prometheus's own parser and prints, per query, the
// metric names it selects or why it does not parse. Input: a JSON array of query strings on
// stdin. Output: a JSON array of {"metrics": [...], "error": "..."} in the same order.
// Built by bin/setup beside promtool; tests/ops/test_grafana_dashboard.py runs it.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
)

type result struct {
	Metrics []string `json:"metrics"`
	Error   string   `json:"error,omitempty"`
}

// names is every metric name a selector of expr names; false when a selector names none
// ({__name__=~"..."} or a bare {job="x"}), which cannot be checked.
func names(expr parser.Expr) ([]string, bool) {
	seen := map[string]bool{}
	named := true
	parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
		vs, ok := node.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := vs.Name
		for _, m := range vs.LabelMatchers {
			if m.Name == labels.MetricName && m.Type == labels.MatchEqual {
				name = m.Value
			}
		}
		if name == "" {
			named = false
		} else {
			seen[name] = true
		}
		return nil
	})
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out, named
}

func main() {
	var queries []string
	if err := json.NewDecoder(os.Stdin).Decode(&queries); err != nil {
		fmt.Fprintln(os.Stderr, "error: stdin is not a JSON array of strings:", err)
		os.Exit(2)
	}
	p := parser.NewParser(parser.Options{})
	out := make([]result, len(queries))
	for i, q := range queries {
		expr, err := p.ParseExpr(q)
		if err != nil {
			out[i] = result{Metrics: []string{}, Error: err.Error()}
			continue
		}
		found, named := names(expr)
		out[i] = result{Metrics: found}
		if !named {
			out[i].Error = "a selector names no metric"
		}
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}
