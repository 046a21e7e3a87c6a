// Package safelogs writes a command's log (klog's, and what libraries log
// through it) as text only, through a terminalsafe.Writer: a daemon logs
// names, paths and messages that tenants and servers chose, and a value
// with a line break in it reached the journal as it was, escape sequences
// included.
package safelogs

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/pflag"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/klog/v2"

	"github.com/nodus-dev/nodus/pkg/terminalsafe"
)

// Install has klog write its text format to out through a
// terminalsafe.Writer, at the verbosity and flush frequency flags hold (the
// -v, --vmodule and --log-flush-frequency that component-base's cli.Run
// adds). Call it once, after the flags are parsed: a command's
// PersistentPreRunE.
func Install(flags *pflag.FlagSet, out io.Writer) error {
	c := logsapi.NewLoggingConfiguration()
	if f := flags.Lookup("v"); f != nil {
		if err := logsapi.VerbosityLevelPflag(&c.Verbosity).Set(f.Value.String()); err != nil {
			return fmt.Errorf("-v: %w", err)
		}
	}
	if f := flags.Lookup("vmodule"); f != nil {
		if err := logsapi.VModuleConfigurationPflag(&c.VModule).Set(f.Value.String()); err != nil {
			return fmt.Errorf("--vmodule: %w", err)
		}
	}
	if f := flags.Lookup(logsapi.LogFlushFreqFlagName); f != nil {
		d, err := time.ParseDuration(f.Value.String())
		if err != nil {
			return fmt.Errorf("--%s: %w", logsapi.LogFlushFreqFlagName, err)
		}
		c.FlushFrequency.Duration.Duration = d
	}
	w := terminalsafe.NewWriter(out)
	if err := logsapi.ValidateAndApplyWithOptions(c, &logsapi.LoggingOptions{ErrorStream: w, InfoStream: w}, nil); err != nil {
		return err
	}
	// Off, as cli.Run's InitLogs left it (applied without a feature gate,
	// the configuration turns it on): what libraries log through a
	// request's context is written as before, by the same writer.
	klog.EnableContextualLogging(false)
	return nil
}
