package kubectlplugin

import (
	"context"
	"fmt"
	"io"
	"regexp"
	"strings"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/ledgerclient"
)

const (
	// approvalParametersWidth bounds the PARAMETERS column of the approvals table.
	approvalParametersWidth = 120
	// maxApprovalNameLength is the longest name a ToolApproval may have.
	maxApprovalNameLength = 240
)

var digestPattern = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

func newApprovalsCommand(c *commandEnv) *cobra.Command {
	var (
		format        output
		allNamespaces bool
	)
	cmd := &cobra.Command{
		Use:   "approvals",
		Short: "List the actions that await an approval, oldest first",
		Long: `List the ToolActions of tools that require approval and that wait for a decision
(phase AwaitingApproval), oldest first, with what an approver decides about:
the verified requester (toolledger.dev/requested-by, stamped by the API
server), the request digest an approval must name, and every parameter sent
downstream: IN-DIGEST lists those that enter the digest, which an approval
binds, NOT-IN-DIGEST the others. 'kubectl toolledger status KEY' lists them
one per line.

Decide with 'kubectl toolledger approve KEY --digest DIGEST --reason TEXT' or
'deny'. -o json|yaml also prints the principals the caller claims
(spec.provenance.principals).`,
		Example: `  kubectl toolledger approvals -n shop
  kubectl toolledger approvals -A -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			namespace, ledger, err := c.connectList(allNamespaces)
			if err != nil {
				return err
			}
			actions, err := ledger.ListInPhases(cmd.Context(), namespace, []v1alpha1.Phase{v1alpha1.PhaseAwaitingApproval})
			if err != nil {
				return err
			}
			approvals, err := ledgerclient.BuildApprovals(cmd.Context(), ledger, actions, c.now())
			if err != nil {
				return err
			}
			return c.printList(format, approvals, len(approvals.Items) == 0, fmt.Sprintf("No ToolActions await approval in %s.", ledgerclient.Scope(namespace)),
				func(w io.Writer) error { return writeApprovals(w, approvals, allNamespaces) })
		},
	}
	cmd.Flags().BoolVarP(&allNamespaces, "all-namespaces", "A", false, "List the actions awaiting approval across all namespaces.")
	addOutputFlag(cmd, &format, "a summary of each action")
	return cmd
}

func writeApprovals(w io.Writer, approvals ledgerclient.Approvals, withNamespace bool) error {
	columns := []string{"NAME", "AGE", "TOOL", "REQUESTED-BY", "DIGEST", "IN-DIGEST", "NOT-IN-DIGEST"}
	return writeTable(w, "approvals", columns, withNamespace, len(approvals.Items), func(i int) (string, []string) {
		item := approvals.Items[i]
		return item.Namespace, []string{
			item.Name, duration.HumanDuration(time.Duration(item.AgeSeconds) * time.Second), item.Tool,
			cell(orUnstamped(item.RequestedBy)), item.RequestDigest,
			cell(shorten(joinParameters(item.Parameters, true), approvalParametersWidth)),
			cell(shorten(joinParameters(item.Parameters, false), approvalParametersWidth)),
		}
	})
}

// joinParameters writes the parameters that enter the digest, or those
// that do not, as path=value pairs; "" when there are none.
func joinParameters(parameters []ledgerclient.Parameter, inDigest bool) string {
	var pairs []string
	for _, p := range parameters {
		if p.InDigest == inDigest {
			pairs = append(pairs, p.Path+"="+string(p.Value))
		}
	}
	return strings.Join(pairs, " ")
}

func orUnstamped(user string) string {
	if user == "" {
		return "<unstamped>"
	}
	return user
}

// decideOptions are the flags of `approve` and `deny`.
type decideOptions struct {
	decision  v1alpha1.ApprovalDecision
	reason    string
	digest    string
	expiresIn time.Duration
	name      string
	wait      bool
	timeout   time.Duration
	format    output
}

func newApproveCommand(c *commandEnv) *cobra.Command {
	return newDecideCommand(c, v1alpha1.Approved, "approve", "Approve an action that awaits approval, for the request digest you reviewed",
		`Create a ToolApproval with decision Approved for the ToolAction named KEY, bound
to that object (spec.actionUID) and to the request digest you reviewed, as
'kubectl toolledger approvals' lists it beside the parameters it covers:
--digest is required, and nothing is created unless the action still records
that request, so nobody approves what they did not see. The controller then
dispatches the action, and retries or looks it up under its key with no
further approval. The API server stamps you as the approver
(toolledger.dev/decided-by); the controller refuses an approval by the action's
own requester unless the tool sets selfApprovalAllowed.`,
		`  kubectl toolledger approvals -n shop
  kubectl toolledger approve order-1003-charge -n shop --digest sha256:1f0c… --reason "refund agreed with the customer" --wait
  kubectl toolledger approve order-1004-charge --digest sha256:77ab… --reason "checked" --expires-in 1h`)
}

func newDenyCommand(c *commandEnv) *cobra.Command {
	return newDecideCommand(c, v1alpha1.Denied, "deny", "Deny an action that awaits approval: it fails with class Denied, never dispatched",
		`Create a ToolApproval with decision Denied for the ToolAction named KEY, bound
to that object and its request digest: the controller fails the action with
class Denied (reason ApprovalDenied), and it is never dispatched. --digest is
optional here (a denial causes no effect); given, nothing is created unless the
action records it. Otherwise as approve.`,
		`  kubectl toolledger deny order-1005-charge -n shop --reason "amount exceeds the customer's limit"`)
}

func newDecideCommand(c *commandEnv, decision v1alpha1.ApprovalDecision, verb, short, long, example string) *cobra.Command {
	opts := decideOptions{decision: decision, timeout: time.Minute}
	digestUsage := "--digest DIGEST"
	if decision == v1alpha1.Denied {
		digestUsage = "[--digest DIGEST]"
	}
	cmd := &cobra.Command{
		Use:   verb + " KEY " + digestUsage + " --reason TEXT [--expires-in DURATION] [--name NAME] [--wait] [flags]",
		Short: short,
		Long: long + `

The ToolApproval is named <KEY>-approval-<random suffix> unless --name is given.
With --wait the command waits for its Applied condition and exits 1 when it is
False (the reason says why: DigestMismatch, SelfApproval, Expired, ...) or does
not appear within --timeout. With -o json|yaml it prints the ToolApproval.`,
		Example: example,
		Args:    keyArg,
		RunE: func(cmd *cobra.Command, args []string) error {
			return c.decide(cmd.Context(), args[0], opts)
		},
	}
	flags := cmd.Flags()
	flags.StringVar(&opts.reason, "reason", "", "Why, for the record (required).")
	digestHelp := "The request digest you reviewed (required); nothing is created unless the action records it."
	if decision == v1alpha1.Denied {
		digestHelp = "The request digest you reviewed; nothing is created unless the action records it (default: the action's)."
	}
	flags.StringVar(&opts.digest, "digest", "", digestHelp)
	flags.DurationVar(&opts.expiresIn, "expires-in", 0, "The decision stops counting if not applied within this long (spec.expiresAt); default never.")
	flags.StringVar(&opts.name, "name", "", "Name of the ToolApproval (default <KEY>-approval-<random suffix>).")
	flags.BoolVar(&opts.wait, "wait", false, "Wait until the controller sets the approval's Applied condition; exit 1 when it is False.")
	flags.DurationVar(&opts.timeout, "timeout", opts.timeout, "How long --wait waits for the Applied condition.")
	addOutputFlag(cmd, &opts.format, "the ToolApproval")
	return cmd
}

// validate checks the flags against the API's rules and reports every
// problem at once.
func (o decideOptions) validate() error {
	var problems []string
	switch {
	case strings.TrimSpace(o.reason) == "":
		problems = append(problems, "--reason is required: say why, for the record")
	case len(o.reason) > maxReasonLength:
		problems = append(problems, fmt.Sprintf("--reason is %d bytes long; at most %d are recorded", len(o.reason), maxReasonLength))
	}
	switch {
	case o.digest == "" && o.decision == v1alpha1.Approved:
		problems = append(problems, "--digest is required: the request digest you reviewed, as 'kubectl toolledger approvals' lists it")
	case o.digest != "" && !digestPattern.MatchString(o.digest):
		problems = append(problems, fmt.Sprintf("--digest %q is not a request digest (sha256: and 64 lowercase hex digits)", o.digest))
	}
	if o.expiresIn < 0 {
		problems = append(problems, "--expires-in must not be negative")
	}
	if problem := nameProblem(o.name, "ToolApproval", maxApprovalNameLength); problem != "" {
		problems = append(problems, problem)
	}
	if o.wait && o.timeout <= 0 {
		problems = append(problems, "--timeout must be positive")
	}
	if len(problems) > 0 {
		return fmt.Errorf("invalid decision, nothing was created:\n  %s", strings.Join(problems, "\n  "))
	}
	return nil
}

// approval is the object `approve` or `deny` creates about action.
func (o decideOptions) approval(action *v1alpha1.ToolAction, now time.Time) *v1alpha1.ToolApproval {
	a := ledgerclient.NewApproval(action, o.decision, o.reason)
	if o.expiresIn > 0 {
		expires := metav1.NewTime(now.Add(o.expiresIn).Truncate(time.Second))
		a.Spec.ExpiresAt = &expires
	}
	if o.name != "" {
		a.GenerateName, a.Name = "", o.name
	}
	return a
}

func (c *commandEnv) decide(ctx context.Context, key string, opts decideOptions) error {
	if err := opts.validate(); err != nil {
		return err
	}
	namespace, ledger, err := c.connect()
	if err != nil {
		return err
	}
	created, action, err := ledger.Decide(ctx, namespace, key, opts.digest, func(action *v1alpha1.ToolAction) *v1alpha1.ToolApproval {
		return opts.approval(action, c.now())
	})
	if err != nil {
		return err
	}
	parameters, err := ledger.Parameters(ctx, action)
	if err != nil {
		return err
	}
	if opts.format == outputText {
		writeDecision(c.streams.Out, created, action, parameters)
	}
	return report(ctx, c, ledger, created, "ToolApproval", "tappr", key, opts.format, opts.wait, opts.timeout,
		func(ctx context.Context) (*v1alpha1.ToolApproval, []metav1.Condition, error) {
			read, err := ledger.GetApproval(ctx, namespace, created.Name)
			if err != nil {
				return nil, nil, err
			}
			return read, read.Status.Conditions, nil
		})
}

func writeDecision(w io.Writer, approval *v1alpha1.ToolApproval, action *v1alpha1.ToolAction, parameters []ledgerclient.Parameter) {
	fmt.Fprintf(w, "toolapproval.%s/%s created\n", v1alpha1.GroupVersion.Group, approval.Name)
	fmt.Fprintf(w, "  action:        %s\n", approval.Spec.ActionName)
	fmt.Fprintf(w, "  decision:      %s\n", approval.Spec.Decision)
	fmt.Fprintf(w, "  tool:          %s\n", ledgerclient.ToolName(action.Spec.ToolRef))
	fmt.Fprintf(w, "  requested by:  %s\n", orUnstamped(action.Annotations[v1alpha1.RequestedByAnnotation]))
	fmt.Fprintf(w, "  request:       %s\n", approval.Spec.RequestDigest)
	fmt.Fprintf(w, "  in digest:     %s\n", cell(joinParameters(parameters, true)))
	fmt.Fprintf(w, "  not in digest: %s\n", cell(joinParameters(parameters, false)))
	if exp := approval.Spec.ExpiresAt; exp != nil {
		fmt.Fprintf(w, "  expires:       %s\n", timestamp(*exp))
	}
	fmt.Fprintf(w, "  reason:        %s\n", approval.Spec.Reason)
}
