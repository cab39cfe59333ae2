// promql-check reads PromQL expressions as a JSON array of strings on stdin and prints, as a
// JSON array, the parse error of each ("" when it parses), using Prometheus' own parser.
package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/prometheus/prometheus/promql/parser"
)

func main() {
	var exprs []string
	if err := json.NewDecoder(os.Stdin).Decode(&exprs); err != nil {
		fmt.Fprintln(os.Stderr, "promql-check: stdin must be a JSON array of strings:", err)
		os.Exit(2)
	}
	p := parser.NewParser(parser.Options{})
	errs := make([]string, len(exprs))
	for i, e := range exprs {
		if _, err := p.ParseExpr(e); err != nil {
			errs[i] = err.Error()
		}
	}
	if err := json.NewEncoder(os.Stdout).Encode(errs); err != nil {
		os.Exit(2)
	}
}
