package main

// The -o flag of every command that prints something a program may read: the formats it
// takes, their completion, and the JSON and YAML writers. JSON and YAML carry the same keys,
// in camelCase as the config file and Kubernetes objects do (an initialism stays upper-case
// after the first word: handlerSHA256, and lower-case at the start: abiVersion).

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"
)

// outputHelp describes each output format, in the flag's completion.
var outputHelp = map[string]string{
	"table": "a table",
	"wide":  "a table with more columns",
	"text":  "a report for a person",
	"json":  "JSON, for jq or a program",
	"yaml":  "YAML, the same keys as JSON",
}

// bindOutput adds -o/--output to cmd, taking formats (the first is the default), completes
// its values, and refuses any other before the command runs.
func bindOutput(cmd *cobra.Command, output *string, formats ...string) {
	cmd.Flags().StringVarP(output, "output", "o", formats[0], "output format: "+strings.Join(formats, ", "))
	err := cmd.RegisterFlagCompletionFunc("output", func(_ *cobra.Command, _ []string, prefix string) ([]cobra.Completion, cobra.ShellCompDirective) {
		var out []cobra.Completion
		for _, f := range formats {
			if strings.HasPrefix(f, prefix) {
				out = append(out, cobra.CompletionWithDesc(f, outputHelp[f]))
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	})
	if err != nil {
		panic(err) // the flag was just defined: only a programming error gets here
	}
	pre := cmd.PreRunE
	cmd.PreRunE = func(c *cobra.Command, args []string) error {
		if !slices.Contains(formats, *output) {
			return fmt.Errorf("--output %q: want %s", *output, strings.Join(formats, ", "))
		}
		if pre != nil {
			return pre(c, args)
		}
		return nil
	}
}

// writeStructured writes v as indented JSON or as YAML (format "json" or "yaml").
func writeStructured(w io.Writer, format string, v any) error {
	if format == "yaml" {
		b, err := toYAML(v)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	}
	return writeJSON(w, v, true)
}

// writeStreamed writes one item of a stream: a line of JSON, or a YAML document that starts
// with "---".
func writeStreamed(w io.Writer, format string, v any) error {
	if format == "yaml" {
		b, err := toYAML(v)
		if err != nil {
			return err
		}
		_, err = w.Write(append([]byte("---\n"), b...))
		return err
	}
	return writeJSON(w, v, false)
}

func writeJSON(w io.Writer, v any, indent bool) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	if indent {
		enc.SetIndent("", "  ")
	}
	return enc.Encode(v)
}

// toYAML writes v as YAML by way of its JSON, so that the two have the same keys, in the
// same order, with the same values: JSON is YAML, written in flow style; this rewrites it in
// block style, quoting only the strings that would otherwise read as something else.
func toYAML(v any) ([]byte, error) {
	var j bytes.Buffer
	if err := writeJSON(&j, v, false); err != nil {
		return nil, err
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(j.Bytes(), &doc); err != nil {
		return nil, fmt.Errorf("yaml: %w", err)
	}
	blockStyle(&doc)
	var out bytes.Buffer
	enc := yaml.NewEncoder(&out)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return nil, fmt.Errorf("yaml: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("yaml: %w", err)
	}
	return out.Bytes(), nil
}

func blockStyle(n *yaml.Node) {
	n.Style = 0
	for _, c := range n.Content {
		blockStyle(c)
	}
}
