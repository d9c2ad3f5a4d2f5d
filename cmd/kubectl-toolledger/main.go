// Command kubectl-toolledger is the toolledger operator console as a kubectl
// plugin: `kubectl toolledger status|queue|tombstones|resolve|approvals|approve|deny`.
// It reads ToolActions and Tombstones and creates ToolResolutions and
// ToolApprovals with the caller's kubeconfig, and never edits a ToolAction. See `kubectl toolledger --help`.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/toolledger/toolledger/internal/kubectlplugin"
)

func main() {
	// Ctrl-C stops a --wait (or a slow request) through the context, so the
	// command still reports what it did before it was interrupted.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := kubectlplugin.Run(ctx, genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr}, os.Args[1:])
	stop()
	os.Exit(code)
}
