// Package kubectlplugin is the kubectl plugin kubectl-toolledger, the
// operator console on the command line: its commands and their output. It
// shows an action's ledger record (or the tombstone
// of a deleted one), lists the actions that need a human and the tombstones,
// records ToolResolutions, and lists the actions awaiting approval and
// records ToolApprovals. It never writes a ToolAction: the record stays the
// controller's to write, and the console needs no more than the
// toolledger-resolver role (resolve) or the toolledger-approver role
// (approve, deny). What it reads and writes it does through ledgerclient,
// which the web console shares.
package kubectlplugin

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/rest"

	"github.com/toolledger/toolledger/internal/ledgerclient"
)

// Exit codes of the plugin. Scripts may rely on them.
const (
	// ExitOK means the command did what it was asked.
	ExitOK = 0
	// ExitError means it did not: invalid arguments or flags, an object not
	// found, an API error, a resolution or approval that was not applied,
	// or a wait that timed out. The reason is printed on stderr.
	ExitError = 1
)

// commands builds the subcommands, one file each. A new command joins by
// adding its constructor here; the root command and the connection flags
// stay as they are.
var commands = []func(*commandEnv) *cobra.Command{
	newStatusCommand,
	newQueueCommand,
	newTombstonesCommand,
	newResolveCommand,
	newApprovalsCommand,
	newApproveCommand,
	newDenyCommand,
	newVerifyCommand,
	newHistoryCommand,
	newLivesCommand,
	newArchiveCommand,
}

// commandEnv is what every command shares: the streams, the kubectl connection
// flags and the clock.
type commandEnv struct {
	streams genericiooptions.IOStreams
	config  *genericclioptions.ConfigFlags
	now     func() time.Time
}

// Run executes the plugin with args (without the program name) and returns
// the process exit code.
func Run(ctx context.Context, streams genericiooptions.IOStreams, args []string) int {
	root := NewCommand(streams)
	root.SetArgs(args)
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintf(streams.ErrOut, "error: %v\n", err)
		return ExitError
	}
	return ExitOK
}

// NewCommand returns the root command, "kubectl toolledger", with every
// subcommand and kubectl's connection flags (--kubeconfig, --context,
// --namespace/-n, ...).
func NewCommand(streams genericiooptions.IOStreams) *cobra.Command {
	c := &commandEnv{
		streams: streams,
		config:  genericclioptions.NewConfigFlags(true).WithWarningPrinter(streams),
		now:     time.Now,
	}
	// The console talks to one known API group without discovery, so the
	// discovery cache directory would be a flag without effect.
	c.config.CacheDir = nil

	root := &cobra.Command{
		Use:   "kubectl-toolledger",
		Short: "Operator console for toolledger: inspect ToolActions, approve them, and resolve the ones nobody could prove",
		Long: `kubectl toolledger reads the toolledger ledger and records human findings.

A ToolAction is one business intent: its namespace is the tenant and its name
the idempotency key (KEY below). A deleted ToolAction that was dispatched
leaves a Tombstone of the same name, which keeps the key. The console never
edits a ToolAction; it only reads the ledger (ToolActions, Tombstones, archived
records and their tools), asks the archive to verify its history, and creates
ToolResolutions and ToolApprovals.

Exit status: 0 when the command did what it was asked; 1 on invalid arguments
or flags, an object not found, an API error, a resolution or approval that was
not applied, or a wait that timed out.`,
		Annotations: map[string]string{
			// Help and errors then read as the command users type.
			cobra.CommandDisplayNameAnnotation: "kubectl toolledger",
		},
		SilenceUsage:  true,
		SilenceErrors: true,
		// Completion comes through kubectl's plugin completion, not a
		// subcommand of our own.
		CompletionOptions: cobra.CompletionOptions{DisableDefaultCmd: true},
	}
	root.SetIn(streams.In)
	root.SetOut(streams.Out)
	root.SetErr(streams.ErrOut)
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return fmt.Errorf("%w; see '%s --help'", err, cmd.CommandPath())
	})
	c.config.AddFlags(root.PersistentFlags())
	for _, newCommand := range commands {
		root.AddCommand(newCommand(c))
	}
	return root
}

// namespace is the namespace of the request: --namespace, else the
// kubeconfig context's, else "default", as kubectl decides it.
func (c *commandEnv) namespace() (string, error) {
	ns, _, err := c.config.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return "", fmt.Errorf("cannot determine the namespace from the kubeconfig: %w", err)
	}
	return ns, nil
}

// connect returns the namespace of the request and a ledger client for the
// API server that the kubeconfig and flags select.
func (c *commandEnv) connect() (string, *ledgerclient.Ledger, error) {
	namespace, err := c.namespace()
	if err != nil {
		return "", nil, err
	}
	ledger, err := c.ledger()
	if err != nil {
		return "", nil, err
	}
	return namespace, ledger, nil
}

// connectList is connect for a list command: with all, the namespace is
// "", every namespace.
func (c *commandEnv) connectList(all bool) (string, *ledgerclient.Ledger, error) {
	if all {
		ledger, err := c.ledger()
		return "", ledger, err
	}
	return c.connect()
}

// ledger connects to the API server that the kubeconfig and flags select.
func (c *commandEnv) ledger() (*ledgerclient.Ledger, error) {
	cfg, err := c.config.ToRESTConfig()
	if err != nil {
		return nil, fmt.Errorf("cannot load the kubeconfig: %w", err)
	}
	cfg.WarningHandler = rest.NewWarningWriter(c.streams.ErrOut, rest.WarningWriterOptions{Deduplicate: true})
	return ledgerclient.NewLedger(cfg, "kubectl-toolledger")
}
