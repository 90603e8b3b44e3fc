package main

import (
	"fmt"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"github.com/wasmhost/wasmhost/internal/config"
)

func newConfigCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Check or show the daemon's configuration",
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "check FILE",
		Short: "Validate a config file: every unknown key and bad value, named with its line, in one pass",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg := config.Default()
			warnings, err := config.Check(args[0], &cfg)
			for _, w := range warnings {
				fmt.Fprintf(cmd.ErrOrStderr(), "warning: %s\n", w)
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: ok\n", args[0])
			// What the file cannot say: what a sink will need where the daemon runs.
			for _, n := range cfg.PublishNotes() {
				fmt.Fprintf(cmd.OutOrStdout(), "note: %s\n", n)
			}
			return nil
		},
	})
	cmd.AddCommand(&cobra.Command{
		Use:   "defaults",
		Short: "Print the default configuration as YAML, a starting point for a config file",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			enc := yaml.NewEncoder(cmd.OutOrStdout())
			enc.SetIndent(2) // as examples/config/wasmhost.yaml and docs/configuration.md
			if err := enc.Encode(config.Default()); err != nil {
				return err
			}
			return enc.Close()
		},
	})
	return cmd
}
