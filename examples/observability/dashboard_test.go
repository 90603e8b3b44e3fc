package observability

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"testing"
)

// dashboard is the Grafana dashboard, as much of it as the tests read.
type dashboard struct {
	Title      string `json:"title"`
	UID        string `json:"uid"`
	Templating struct {
		List []struct {
			Name       string `json:"name"`
			Type       string `json:"type"`
			Definition string `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`
}

type panel struct {
	ID          int    `json:"id"`
	Type        string `json:"type"`
	Title       string `json:"title"`
	Description string `json:"description"`
	GridPos     struct {
		H, W, X, Y int
	} `json:"gridPos"`
	Datasource *datasource `json:"datasource"`
	Targets    []struct {
		RefID        string      `json:"refId"`
		Expr         string      `json:"expr"`
		LegendFormat string      `json:"legendFormat"`
		Datasource   *datasource `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's
}

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return d
}

// allPanels returns d's panels, those of collapsed rows included.
func (d dashboard) allPanels() []panel {
	var ps []panel
	for _, p := range d.Panels {
		ps = append(ps, p)
		ps = append(ps, p.Panels...)
	}
	return ps
}

// reference is an expression the dashboard or the rules hold, with where it is and the
// labels its legend or templates name.
type reference struct {
	Where     string
	Panel     bool // a query of a dashboard panel (not a variable, not a rule)
	Expr      string
	Templates []string // labels named by {{label}} or {{ $labels.label }}
	refs      refs
}

// references returns every PromQL expression of the dashboard (queries and variables) and
// of the rules file, read.
func references(t *testing.T) []reference {
	t.Helper()
	var rs []reference
	for _, p := range loadDashboard(t).allPanels() {
		for _, tg := range p.Targets {
			rs = append(rs, reference{Where: fmt.Sprintf("%s: panel %q, query %s", dashboardFile, p.Title, tg.RefID), Panel: true,
				Expr: tg.Expr, Templates: templateLabels(tg.LegendFormat)})
		}
	}
	for _, v := range loadDashboard(t).Templating.List {
		if v.Type != "query" {
			continue
		}
		m := labelValuesRE.FindStringSubmatch(v.Definition)
		if m == nil {
			t.Fatalf("%s: variable %s: %q is not label_values(selector, label)", dashboardFile, v.Name, v.Definition)
		}
		// The label asked for must be one of the selector's: a legend of it says so.
		rs = append(rs, reference{Where: fmt.Sprintf("%s: variable %s", dashboardFile, v.Name), Expr: m[1], Templates: []string{m[2]}})
	}
	for _, r := range loadRules(t).rules() {
		var tmpl []string
		for _, a := range r.Annotations {
			tmpl = append(tmpl, templateLabels(a)...)
		}
		rs = append(rs, reference{Where: fmt.Sprintf("%s: %s%s", rulesFile, r.Alert, r.Record), Expr: r.Expr, Templates: tmpl})
	}
	for i := range rs {
		var err error
		if rs[i].refs, err = parseRefs(rs[i].Expr); err != nil {
			t.Fatalf("%s: %v", rs[i].Where, err)
		}
		if len(rs[i].refs.Selectors) == 0 {
			t.Errorf("%s: %q names no metric", rs[i].Where, rs[i].Expr)
		}
	}
	return rs
}

var labelValuesRE = regexp.MustCompile(`^label_values\((.+),\s*([a-zA-Z_][a-zA-Z0-9_]*)\)$`)

// TestDashboardLayout: the dashboard is one Grafana can import: panel ids unique, panels on
// the 24-column grid without overlapping, each with a description, and queries each with a
// refId and the dashboard's data source variable.
func TestDashboardLayout(t *testing.T) {
	d := loadDashboard(t)
	if d.UID == "" || d.Title == "" {
		t.Errorf("uid %q title %q", d.UID, d.Title)
	}
	ids := map[int]bool{}
	cells := map[[2]int]string{}
	for _, p := range d.allPanels() {
		if ids[p.ID] {
			t.Errorf("panel %q: id %d used twice", p.Title, p.ID)
		}
		ids[p.ID] = true
		g := p.GridPos
		if g.W <= 0 || g.H <= 0 || g.X < 0 || g.X+g.W > 24 || g.Y < 0 {
			t.Errorf("panel %q: gridPos %+v off the 24-column grid", p.Title, g)
		}
		for x := g.X; x < g.X+g.W; x++ {
			for y := g.Y; y < g.Y+g.H; y++ {
				if o, ok := cells[[2]int{x, y}]; ok {
					t.Errorf("panels %q and %q overlap at (%d, %d)", o, p.Title, x, y)
				}
				cells[[2]int{x, y}] = p.Title
			}
		}
		if p.Type == "row" {
			continue
		}
		if p.Description == "" || len(p.Targets) == 0 {
			t.Errorf("panel %q: description %q, %d queries", p.Title, p.Description, len(p.Targets))
		}
		refIDs := map[string]bool{}
		for _, tg := range p.Targets {
			if tg.RefID == "" || refIDs[tg.RefID] || tg.Expr == "" {
				t.Errorf("panel %q: query refId %q (used twice or empty) expr %q", p.Title, tg.RefID, tg.Expr)
			}
			refIDs[tg.RefID] = true
			if tg.Datasource == nil || tg.Datasource.UID != "${datasource}" {
				t.Errorf("panel %q query %s: data source %v, want the variable ${datasource}", p.Title, tg.RefID, tg.Datasource)
			}
		}
	}
	var vars []string
	for _, v := range d.Templating.List {
		vars = append(vars, v.Name)
	}
	if !slices.Equal(vars, []string{"datasource", "job", "instance"}) {
		t.Errorf("variables %v, want datasource, job, instance", vars)
	}
}

// TestDashboardFiltersEverySelector: every selector of every panel is narrowed by the job
// and instance variables, so that picking a daemon shows that daemon everywhere.
func TestDashboardFiltersEverySelector(t *testing.T) {
	for _, r := range references(t) {
		if !r.Panel {
			continue
		}
		for _, s := range r.refs.Selectors {
			if !slices.Contains(s.Matchers, matcher{"job", "=~", "$job"}) || !slices.Contains(s.Matchers, matcher{"instance", "=~", "$instance"}) {
				t.Errorf("%s: %s has no job=~\"$job\", instance=~\"$instance\"", r.Where, s.Metric)
			}
		}
	}
}

// TestDashboardCoversWhatOperatorsLookAt: the dashboard queries the metrics of each thing a
// node's or a fleet's operator looks at first.
func TestDashboardCoversWhatOperatorsLookAt(t *testing.T) {
	queried := map[string]bool{}
	for _, r := range references(t) {
		if !r.Panel {
			continue
		}
		for _, m := range r.refs.Metrics() {
			queried[m] = true
		}
	}
	for what, metric := range map[string]string{
		"plugins by state and type":   "wasmhost_plugins",
		"registration latency":        "wasmhost_registration_duration_seconds_bucket",
		"handler call latency":        "wasmhost_handler_call_duration_seconds_bucket",
		"handler CPU":                 "wasmhost_handler_cpu_seconds_total",
		"refusals":                    "wasmhost_handler_refusals_total",
		"quarantines":                 "wasmhost_handler_quarantined",
		"rollbacks":                   "wasmhost_handler_pinned",
		"memory":                      "process_resident_memory_bytes",
		"memory's ceiling":            "go_gc_gomemlimit_bytes",
		"sinks":                       "wasmhost_publish_failing",
		"sources":                     "wasmhost_handler_not_serving",
		"daemons ready":               "wasmhost_ready",
		"versions across a fleet":     "wasmhost_build_info",
		"throttling of handlers' CPU": "wasmhost_handler_throttled_seconds_total",
	} {
		if !queried[metric] {
			t.Errorf("%s: no query of %s", what, metric)
		}
	}
}
