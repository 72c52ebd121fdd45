package metrics

import (
	"encoding/json"
	"maps"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
)

// exported returns the label names of every metric the proxy exports,
// by name, each labelled collector touched once so that it is gathered.
func exported(t *testing.T) map[string]map[string]bool {
	one := func() float64 { return 1 }
	m := New(Gauges{InFlight: one, Sessions: one, Children: one})
	m.Observe(proxy.ActSuppressed, proxy.Server)
	m.Cancelled("client")
	p := m.NewPolicy("upstream")
	p.HookRan("on_cancel", true)
	p.ClientTimeoutFired(true)
	p.Forwarded(true)
	p.CancelSettled("true")
	p.CancelNotified(time.Millisecond)
	m.Operation("tools/call", "t", "", "tcp", "2025-11-25", time.Millisecond)
	families, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]bool{}
	for _, f := range families {
		labels := map[string]bool{"job": true, "instance": true} // added by the scrape
		for _, mt := range f.GetMetric() {
			for _, l := range mt.GetLabel() {
				labels[l.GetName()] = true
			}
		}
		out[f.GetName()] = labels
		if f.GetType() == dto.MetricType_HISTOGRAM { // the series a histogram is queried by
			bucket := map[string]bool{"le": true}
			maps.Copy(bucket, labels)
			out[f.GetName()+"_bucket"], out[f.GetName()+"_sum"], out[f.GetName()+"_count"] = bucket, labels, labels
		}
	}
	return out
}

var (
	metricName = regexp.MustCompile(`(?:mcp_cancel_proxy|mcp_server)_[a-z0-9_]+`)
	selector   = regexp.MustCompile(`((?:mcp_cancel_proxy|mcp_server)_[a-z0-9_]+)\{([^}]*)\}`)
	matcher    = regexp.MustCompile(`([a-zA-Z_]\w*)\s*(?:=~|!~|!=|=)`)
	grouping   = regexp.MustCompile(`\b(?:by|without)\s*\(([^)]*)\)`)
	legend     = regexp.MustCompile(`\{\{\s*(\w+)\s*\}\}`)
)

// TestDashboardNamesExportedMetrics: every query of the Grafana dashboard
// (deploy/grafana) names metrics the proxy really exports, and only
// labels they have (or the scrape adds).
func TestDashboardNamesExportedMetrics(t *testing.T) {
	data, err := os.ReadFile("../../deploy/grafana/mcp-cancel-proxy.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr, LegendFormat string }
		}
		Templating struct {
			List []struct{ Name, Query string }
		}
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("dashboard: %v", err)
	}
	metrics := exported(t)
	check := func(where, expr, legendFormat string) {
		names := metricName.FindAllString(expr, -1)
		if len(names) == 0 {
			t.Errorf("%s: %q names no metric of the proxy", where, expr)
		}
		labels := map[string]bool{}
		for _, n := range names {
			if metrics[n] == nil {
				t.Errorf("%s: %s is not exported", where, n)
			}
			for l := range metrics[n] {
				labels[l] = true
			}
		}
		for _, sel := range selector.FindAllStringSubmatch(expr, -1) {
			for _, mm := range matcher.FindAllStringSubmatch(sel[2], -1) {
				if metrics[sel[1]] != nil && !metrics[sel[1]][mm[1]] {
					t.Errorf("%s: %s has no label %q", where, sel[1], mm[1])
				}
			}
		}
		var used []string
		for _, g := range grouping.FindAllStringSubmatch(expr, -1) {
			used = append(used, strings.Split(g[1], ",")...)
		}
		for _, l := range legend.FindAllStringSubmatch(legendFormat, -1) {
			used = append(used, l[1])
		}
		for _, l := range used {
			if l = strings.TrimSpace(l); !labels[l] {
				t.Errorf("%s: no metric of %q has label %q", where, expr, l)
			}
		}
	}
	if len(dash.Panels) == 0 {
		t.Fatal("no panels")
	}
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			check("panel "+p.Title, q.Expr, q.LegendFormat)
		}
	}
	for _, v := range dash.Templating.List {
		if strings.Contains(v.Query, "label_values") {
			check("variable "+v.Name, v.Query, "")
		}
	}
}
