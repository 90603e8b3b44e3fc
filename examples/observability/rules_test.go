// Package observability holds wasmhost's Grafana dashboard and Prometheus alerting rules; its
// tests check them with promtool, keep the PrometheusRule identical to the plain rules file, and
// check that every metric and label they name is one a running daemon exports.
package observability

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"testing"

	"github.com/wasmhost/wasmhost/internal/doctest"
	"go.yaml.in/yaml/v3"
)

var update = flag.Bool("update", false, "rewrite prometheusrule.yaml from alerts.rules.yaml")

const (
	rulesFile          = "alerts.rules.yaml"
	rulesTestFile      = "alerts.test.yaml"
	prometheusRuleFile = "prometheusrule.yaml"
	dashboardFile      = "grafana-dashboard.json"
)

// promtool returns promtool's path: it skips t where it is not installed, and fails t in CI.
func promtool(t *testing.T) string {
	t.Helper()
	return doctest.Tool(t, "promtool", "Debian: prometheus")
}

// TestRulesCheck: promtool check rules accepts the rules file (syntax, PromQL, templates).
func TestRulesCheck(t *testing.T) {
	out, err := exec.Command(promtool(t), "check", "rules", rulesFile).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules %s: %v\n%s", rulesFile, err, out)
	}
	t.Logf("%s", out)
}

// TestRulesUnit runs the unit tests of every alert on synthetic series (alerts.test.yaml), and
// checks that every alert of the rules file has one: an alert nobody tested fails here.
func TestRulesUnit(t *testing.T) {
	out, err := exec.Command(promtool(t), "test", "rules", rulesTestFile).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool test rules %s: %v\n%s", rulesTestFile, err, out)
	}
	var tests struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string      `yaml:"alertname"`
				ExpAlerts []yaml.Node `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	readYAML(t, rulesTestFile, &tests)
	fired := map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fired[a.Alertname] = true
			}
		}
	}
	for _, r := range loadRules(t).rules() {
		if r.Alert != "" && !fired[r.Alert] {
			t.Errorf("alert %s: no test in %s expects it to fire", r.Alert, rulesTestFile)
		}
	}
}

// TestAlertsSayWhatToRun: every alert has a for:, a severity, a summary and a description that
// names a wasmhost command to run next.
func TestAlertsSayWhatToRun(t *testing.T) {
	for _, r := range loadRules(t).rules() {
		if r.Alert == "" {
			continue
		}
		if r.For == "" {
			t.Errorf("alert %s: no for:", r.Alert)
		}
		if s := r.Labels["severity"]; s != "critical" && s != "warning" {
			t.Errorf("alert %s: severity %q, want critical or warning", r.Alert, s)
		}
		if r.Annotations["summary"] == "" {
			t.Errorf("alert %s: no summary", r.Alert)
		}
		if d := r.Annotations["description"]; !strings.Contains(d, "`wasmhost ") {
			t.Errorf("alert %s: the description names no wasmhost command to run: %q", r.Alert, d)
		}
	}
}

// TestPrometheusRuleIsTheRulesFile: prometheusrule.yaml is the rules file's groups under a
// PrometheusRule's spec, as prometheusRule makes it (-update rewrites it).
func TestPrometheusRuleIsTheRulesFile(t *testing.T) {
	src, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	want, err := prometheusRule(src)
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile(prometheusRuleFile, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(prometheusRuleFile)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is not %s's groups: run go test ./examples/observability -run TestPrometheusRuleIsTheRulesFile -update", prometheusRuleFile, rulesFile)
	}
	// And decoded, as the operator's API server and Prometheus read them.
	var pr struct {
		APIVersion string `yaml:"apiVersion"`
		Kind       string `yaml:"kind"`
		Spec       any    `yaml:"spec"`
	}
	readYAML(t, prometheusRuleFile, &pr)
	var plain any
	readYAML(t, rulesFile, &plain)
	if pr.APIVersion != "monitoring.coreos.com/v1" || pr.Kind != "PrometheusRule" {
		t.Errorf("%s: %s %s, want monitoring.coreos.com/v1 PrometheusRule", prometheusRuleFile, pr.APIVersion, pr.Kind)
	}
	if !reflect.DeepEqual(pr.Spec, plain) {
		t.Errorf("%s: spec decodes otherwise than %s", prometheusRuleFile, rulesFile)
	}
}

const prometheusRuleHeader = `# wasmhost's alerting rules as a PrometheusRule (monitoring.coreos.com/v1), for the Prometheus
# Operator. Generated from alerts.rules.yaml, which says what they are: edit that file, then
#   go test ./examples/observability -run TestPrometheusRuleIsTheRulesFile -update
#
# The operator loads the PrometheusRules its Prometheus's ruleSelector selects: with
# kube-prometheus-stack, add the label release: <its Helm release name> (or set
# ruleSelectorNilUsesHelmValues: false).
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: wasmhost
  namespace: wasmhost
  labels:
    app.kubernetes.io/name: wasmhost
spec:
`

// prometheusRule returns the PrometheusRule of the rules file src: its groups: and what follows,
// indented under spec:, after a header of its own (src's header comment is left out).
func prometheusRule(src []byte) ([]byte, error) {
	i := bytes.Index(src, []byte("\ngroups:\n"))
	if i < 0 {
		return nil, errors.New("observability: the rules file has no line groups:")
	}
	var b bytes.Buffer
	b.WriteString(prometheusRuleHeader)
	for _, line := range strings.SplitAfter(string(src[i+1:]), "\n") {
		if strings.TrimSpace(line) != "" {
			b.WriteString("  ")
		}
		b.WriteString(line)
	}
	return b.Bytes(), nil
}

// ruleFile is a Prometheus rules file, as much of it as the tests read.
type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []rule `yaml:"rules"`
	} `yaml:"groups"`
}

type rule struct {
	Alert       string            `yaml:"alert"`
	Record      string            `yaml:"record"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

func (f ruleFile) rules() []rule {
	var rs []rule
	for _, g := range f.Groups {
		rs = append(rs, g.Rules...)
	}
	return rs
}

func loadRules(t *testing.T) ruleFile {
	t.Helper()
	var f ruleFile
	readYAML(t, rulesFile, &f)
	if len(f.rules()) == 0 {
		t.Fatalf("%s: no rules", rulesFile)
	}
	return f
}

func readYAML(t *testing.T, name string, v any) {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}
