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
		Short: "Validate a config file: unknown keys and bad values are named with their line",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg := config.Default()
			if err := config.Load(args[0], &cfg); err != nil {
				return err
			}
			if err := cfg.Validate(); err != nil {
				return fmt.Errorf("%s is not valid:\n%w", args[0], err)
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
