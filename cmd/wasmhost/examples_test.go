package main

import (
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// helpExamples returns every command line of the Example texts of cmd and its subcommands,
// with its command: continuation lines joined, and what follows a pipe, a redirection or &&
// cut off (another program's).
func helpExamples(cmd *cobra.Command) map[string][]string {
	found := map[string][]string{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		text := strings.ReplaceAll(c.Example, "\\\n", " ")
		for _, line := range strings.Split(text, "\n") {
			fields := strings.Fields(line)
			for k, f := range fields {
				if f == "|" || f == ">" || f == "&&" {
					fields = fields[:k]
					break
				}
			}
			if len(fields) > 0 {
				found[c.CommandPath()] = append(found[c.CommandPath()], strings.Join(fields, " "))
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(cmd)
	return found
}

// TestHelpExamplesParse checks every example of every command's --help: it names a command
// that exists, with flags that command has and the arguments it takes (the flags and
// arguments parsed as a run would parse them, on a fresh command tree each time, without
// running it).
func TestHelpExamplesParse(t *testing.T) {
	examples := helpExamples(newRootCmd())
	var n int
	for path, lines := range examples {
		for _, line := range lines {
			n++
			args := strings.Fields(line)
			if args[0] != "wasmhost" {
				t.Errorf("%s --help: example %q does not start with wasmhost", path, line)
				continue
			}
			c, rest, err := newRootCmd().Find(args[1:])
			if err != nil {
				t.Errorf("%s --help: example %q: %v", path, line, err)
				continue
			}
			if !strings.HasPrefix(line, c.CommandPath()+" ") && line != c.CommandPath() {
				t.Errorf("%s --help: example %q runs %q", path, line, c.CommandPath())
				continue
			}
			if err := c.ParseFlags(rest); err != nil {
				t.Errorf("%s --help: example %q: %v", path, line, err)
				continue
			}
			if err := c.ValidateArgs(c.Flags().Args()); err != nil {
				t.Errorf("%s --help: example %q: %v", path, line, err)
			}
		}
	}
	if n < 30 {
		t.Errorf("found %d examples in the help texts, want every command's", n)
	}
}
