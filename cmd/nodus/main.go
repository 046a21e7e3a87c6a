// Command nodus is the Nodus CLI for customers and operators.
package main

import (
	"os"

	"github.com/nodus-dev/nodus/pkg/cli"
)

func main() {
	streams := cli.Streams{In: os.Stdin, Out: os.Stdout, Err: os.Stderr}
	cmd, globals := cli.NewCommand(streams)
	os.Exit(cli.Report(cmd.Execute(), globals.Output, os.Stderr))
}
