package observability

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// The dashboard and the rules are checked against what the daemon exports by reading their
// PromQL with the small reader below rather than Prometheus's parser, which would bring the
// Prometheus server's modules into the daemon's go.mod. It finds what the checks need: every
// vector selector (a metric name and its label matchers), and the labels named by by, without,
// on, ignoring, group_left and group_right. It knows PromQL's lexical grammar (strings, numbers
// and durations, range brackets, comments, keywords) and Grafana's $variables, and refuses
// what it cannot read (an unclosed brace, bracket or string).

// matcher is one label matcher of a selector: label op "value".
type matcher struct {
	Label, Op, Value string
}

// selector is a vector selector: a metric name and its matchers.
type selector struct {
	Metric   string
	Matchers []matcher
}

// refs is what an expression names.
type refs struct {
	Selectors []selector
	Grouping  []string // labels of by, without, on, ignoring, group_left, group_right
}

// Metrics returns the metric names of r's selectors.
func (r refs) Metrics() []string {
	var ms []string
	for _, s := range r.Selectors {
		ms = append(ms, s.Metric)
	}
	return ms
}

type token struct {
	kind byte // 'i' identifier, 's' string, 'n' number or duration, 'v' $variable, 'p' punctuation or operator
	text string
}

var groupingKeywords = []string{"by", "without", "on", "ignoring", "group_left", "group_right"}

// otherKeywords are identifiers that are not metric names: operators, aggregations (which may
// be followed by by or without before their parenthesis) and literals.
var otherKeywords = []string{"and", "or", "unless", "bool", "offset", "inf", "nan", "atan2",
	"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values", "bottomk", "topk", "quantile", "limitk", "limit_ratio"}

// parseRefs reads expr (PromQL, with Grafana's $variables) and returns what it names.
func parseRefs(expr string) (refs, error) {
	toks, err := lex(expr)
	if err != nil {
		return refs{}, err
	}
	var r refs
	for i := 0; i < len(toks); i++ {
		t := toks[i]
		next := func() string {
			if i+1 < len(toks) {
				return toks[i+1].text
			}
			return ""
		}
		switch {
		case t.kind == 'p' && t.text == "[":
			j := slices.IndexFunc(toks[i:], func(t token) bool { return t.kind == 'p' && t.text == "]" })
			if j < 0 {
				return refs{}, fmt.Errorf("%q: [ not closed", expr)
			}
			i += j
		case t.kind == 'p' && t.text == "{": // a selector without a name: {__name__="..."}
			s := selector{}
			n, err := parseMatchers(toks[i:], &s)
			if err != nil {
				return refs{}, fmt.Errorf("%q: %w", expr, err)
			}
			for _, m := range s.Matchers {
				if m.Label == "__name__" && m.Op == "=" {
					s.Metric = m.Value
				}
			}
			r.Selectors = append(r.Selectors, s)
			i += n - 1
		case t.kind != 'i':
		case slices.Contains(groupingKeywords, strings.ToLower(t.text)):
			if next() != "(" {
				continue // group_left without a label list
			}
			j := i + 2
			for ; j < len(toks) && toks[j].text != ")"; j++ {
				if toks[j].kind == 'i' {
					r.Grouping = append(r.Grouping, toks[j].text)
				} else if toks[j].text != "," {
					return refs{}, fmt.Errorf("%q: %s ( ... %q", expr, t.text, toks[j].text)
				}
			}
			i = j
		case slices.Contains(otherKeywords, strings.ToLower(t.text)):
		case next() == "(": // a function or an aggregation
		default:
			s := selector{Metric: t.text}
			if next() == "{" {
				n, err := parseMatchers(toks[i+1:], &s)
				if err != nil {
					return refs{}, fmt.Errorf("%q: %s: %w", expr, t.text, err)
				}
				i += n
			}
			r.Selectors = append(r.Selectors, s)
		}
	}
	return r, nil
}

// parseMatchers reads {label op "value", ...} at the start of toks into s, and returns how
// many tokens it took.
func parseMatchers(toks []token, s *selector) (int, error) {
	i := 1
	for ; i < len(toks) && toks[i].text != "}"; i++ {
		if toks[i].text == "," {
			continue
		}
		if i+2 >= len(toks) || (toks[i].kind != 'i' && toks[i].kind != 's') || toks[i+1].kind != 'p' || toks[i+2].kind != 's' {
			return 0, fmt.Errorf("a matcher that is not label op \"value\" at %q", toks[i].text)
		}
		op := toks[i+1].text
		if op != "=" && op != "!=" && op != "=~" && op != "!~" {
			return 0, fmt.Errorf("matcher operator %q", op)
		}
		s.Matchers = append(s.Matchers, matcher{Label: unquote(toks[i]), Op: op, Value: unquote(toks[i+2])})
		i += 2
	}
	if i == len(toks) {
		return 0, fmt.Errorf("{ not closed")
	}
	return i + 1, nil
}

func unquote(t token) string {
	if t.kind != 's' {
		return t.text
	}
	s := t.text[1 : len(t.text)-1]
	if t.text[0] == '`' {
		return s
	}
	return strings.NewReplacer(`\\`, `\`, `\"`, `"`, `\'`, `'`, `\n`, "\n").Replace(s)
}

// lex splits expr into tokens; comments and spaces are dropped.
func lex(expr string) ([]token, error) {
	var toks []token
	rs := []rune(expr)
	isIdent := func(r rune, first bool) bool {
		return r == '_' || r == ':' || unicode.IsLetter(r) || (!first && unicode.IsDigit(r))
	}
	for i := 0; i < len(rs); {
		r := rs[i]
		start := i
		switch {
		case unicode.IsSpace(r):
			i++
			continue
		case r == '#':
			for i < len(rs) && rs[i] != '\n' {
				i++
			}
			continue
		case r == '"' || r == '\'' || r == '`':
			i++
			for i < len(rs) && rs[i] != r {
				if rs[i] == '\\' && r != '`' {
					i++
				}
				i++
			}
			if i >= len(rs) {
				return nil, fmt.Errorf("%q: string not closed", expr)
			}
			i++
			toks = append(toks, token{'s', string(rs[start:i])})
		case r == '$': // Grafana: $name, ${name}, ${name:format}
			i++
			if i < len(rs) && rs[i] == '{' {
				for i < len(rs) && rs[i] != '}' {
					i++
				}
				i++
			} else {
				for i < len(rs) && isIdent(rs[i], false) {
					i++
				}
			}
			toks = append(toks, token{'v', string(rs[start:i])})
		case unicode.IsDigit(r) || (r == '.' && i+1 < len(rs) && unicode.IsDigit(rs[i+1])):
			// Numbers and durations (5m, 1h30m, 1e18, 0x1f): letters included.
			for i < len(rs) && (unicode.IsDigit(rs[i]) || unicode.IsLetter(rs[i]) || rs[i] == '.') {
				i++
			}
			toks = append(toks, token{'n', string(rs[start:i])})
		case isIdent(r, true):
			for i < len(rs) && isIdent(rs[i], false) {
				i++
			}
			toks = append(toks, token{'i', string(rs[start:i])})
		default:
			i++
			if i < len(rs) && slices.Contains([]string{"==", "!=", "=~", "!~", "<=", ">="}, string(rs[start:i+1])) {
				i++
			}
			toks = append(toks, token{'p', string(rs[start:i])})
		}
	}
	return toks, nil
}

// templateLabels returns the labels a Grafana legend ({{label}}) or an alert's template
// ({{ $labels.label }}) names.
func templateLabels(s string) []string {
	var ls []string
	for _, m := range templateLabelRE.FindAllStringSubmatch(s, -1) {
		ls = append(ls, m[1]+m[2])
	}
	return ls
}

var templateLabelRE = regexp.MustCompile(`\{\{\s*(?:\$labels\.([a-zA-Z_][a-zA-Z0-9_]*)|([a-zA-Z_][a-zA-Z0-9_]*))\s*\}\}`)

func TestParseRefs(t *testing.T) {
	for _, c := range []struct {
		expr     string
		want     []selector
		grouping []string
	}{
		{`wasmhost_ready == 0`, []selector{{Metric: "wasmhost_ready"}}, nil},
		{`sum by (plugin_type, le) (rate(x_bucket{job=~"$job", result="ok"}[$__rate_interval] offset 5m))`,
			[]selector{{"x_bucket", []matcher{{"job", "=~", "$job"}, {"result", "=", "ok"}}}}, []string{"plugin_type", "le"}},
		{`sum(rate(a[5m])) without (instance) / on (job) group_left (version) b{x!~"a|b}"} # a comment naming c`,
			[]selector{{Metric: "a"}, {"b", []matcher{{"x", "!~", "a|b}"}}}}, []string{"instance", "job", "version"}},
		{`(go_sys - go_rel) > 0.9 * lim and lim < 2^62 and on (instance, job) info`,
			[]selector{{Metric: "go_sys"}, {Metric: "go_rel"}, {Metric: "lim"}, {Metric: "lim"}, {Metric: "info"}}, []string{"instance", "job"}},
		{`count({__name__="n", 'l'="v\"w"}) or vector(1e+18)`,
			[]selector{{"n", []matcher{{"__name__", "=", "n"}, {"l", "=", `v"w`}}}}, nil},
		{`a * on (h) group_right () b`, []selector{{Metric: "a"}, {Metric: "b"}}, []string{"h"}},
	} {
		r, err := parseRefs(c.expr)
		if err != nil {
			t.Errorf("%s: %v", c.expr, err)
			continue
		}
		for i := range r.Selectors {
			if len(r.Selectors[i].Matchers) == 0 {
				r.Selectors[i].Matchers = nil
			}
		}
		if fmt.Sprint(r.Selectors) != fmt.Sprint(c.want) || fmt.Sprint(r.Grouping) != fmt.Sprint(c.grouping) {
			t.Errorf("%s:\n got %v %v\nwant %v %v", c.expr, r.Selectors, r.Grouping, c.want, c.grouping)
		}
	}
	for _, bad := range []string{`a{b="c"`, `a{b=c}`, `rate(a[5m)`, `a{b="c}`} {
		if _, err := parseRefs(bad); err == nil {
			t.Errorf("%s: read without an error", bad)
		}
	}
	if got := templateLabels(`{{instance}} {{ $labels.plugin_type }} {{ $value }}`); fmt.Sprint(got) != "[instance plugin_type]" {
		t.Errorf("templateLabels: %v", got)
	}
}
