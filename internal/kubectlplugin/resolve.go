package kubectlplugin

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/ledgerclient"
)

// Limits of ToolResolutionSpec, checked before anything is sent so that a
// mistake costs no request and leaves no object behind.
const (
	maxReasonLength      = 1024
	maxExternalRefLength = 512
	// maxResolutionNameLength leaves room for "toolresolution/" in the
	// action's history.
	maxResolutionNameLength = 238
)

// resolutionPollInterval is how often --wait reads a resolution or an
// approval back.
const resolutionPollInterval = 250 * time.Millisecond

// resolveOptions are the flags of `resolve`.
type resolveOptions struct {
	attempt     int32
	outcome     string
	reason      string
	externalRef string
	name        string
	wait        bool
	timeout     time.Duration
	format      output
}

func newResolveCommand(c *commandEnv) *cobra.Command {
	opts := resolveOptions{timeout: time.Minute}
	cmd := &cobra.Command{
		Use:   "resolve KEY --attempt N --outcome Succeeded|Failed|RetrySafe --reason TEXT [--external-ref REF] [--name NAME] [--wait] [flags]",
		Short: "Record what really happened to an Unknown or Escalated action",
		Long: `Create a ToolResolution for the ToolAction named KEY: an operator's finding about
an action whose outcome nobody could prove. The controller applies it to the
action and appends it to the action's history; the console itself never edits
the action.

  --outcome Succeeded  the effect happened; --external-ref names it downstream
  --outcome Failed     the effect did not happen and must not be attempted again
  --outcome RetrySafe  the effect did not happen; attempt it again under the same key

--attempt is the attempt you judged, as 'kubectl toolledger status KEY'
shows it: the resolution is applied only while the action is still at that
attempt, so that what you found about one attempt never re-sends a later one
that may have applied. The action must exist, be Unknown or Escalated and be
at that attempt; otherwise nothing is created. The resolution is named <KEY>-resolution-<random suffix> unless --name
is given (the API server shortens a long KEY in the generated name).

With --wait the command waits for the resolution's Applied condition and exits
1 when it is False or does not appear within --timeout. With -o json|yaml it
prints the ToolResolution (as last read, when waiting).`,
		Example: `  kubectl toolledger resolve order-1003-charge -n shop --attempt 1 --outcome Succeeded \
      --external-ref ch_0123456789abcdef01234567 --reason "charge found in the provider's dashboard" --wait
  kubectl toolledger resolve order-1004-charge --attempt 2 --outcome RetrySafe --reason "provider confirmed no charge exists"`,
		Args: keyArg,
		RunE: func(cmd *cobra.Command, args []string) error {
			return c.resolve(cmd.Context(), args[0], opts)
		},
	}
	flags := cmd.Flags()
	flags.Int32Var(&opts.attempt, "attempt", 0, "The attempt you judged, as 'kubectl toolledger status KEY' shows it (required): nothing is applied if the action has moved on to another.")
	flags.StringVar(&opts.outcome, "outcome", "", "What you established downstream: Succeeded, Failed or RetrySafe (required).")
	flags.StringVar(&opts.reason, "reason", "", "How you know, for the record (required).")
	flags.StringVar(&opts.externalRef, "external-ref", "", "The downstream's identifier of the effect (required with --outcome Succeeded, refused otherwise).")
	flags.StringVar(&opts.name, "name", "", "Name of the ToolResolution (default <KEY>-resolution-<random suffix>).")
	flags.BoolVar(&opts.wait, "wait", false, "Wait until the controller sets the resolution's Applied condition; exit 1 when it is False.")
	flags.DurationVar(&opts.timeout, "timeout", opts.timeout, "How long --wait waits for the Applied condition.")
	addOutputFlag(cmd, &opts.format, "the ToolResolution")
	return cmd
}

// validate checks the flags against the API's rules and reports every
// problem at once.
func (o resolveOptions) validate() error {
	var problems []string
	if o.attempt < 1 {
		problems = append(problems, "--attempt is required: the attempt you judged, as 'kubectl toolledger status KEY' shows it")
	}
	switch v1alpha1.ResolutionOutcome(o.outcome) {
	case v1alpha1.ResolvedSucceeded:
		if strings.TrimSpace(o.externalRef) == "" {
			problems = append(problems, "--outcome Succeeded needs --external-ref, the downstream's identifier of the effect")
		}
	case v1alpha1.ResolvedFailed, v1alpha1.ResolvedRetrySafe:
		if o.externalRef != "" {
			problems = append(problems, fmt.Sprintf("--external-ref goes only with --outcome Succeeded; a %s outcome records no effect downstream", o.outcome))
		}
	case "":
		problems = append(problems, "--outcome is required: Succeeded, Failed or RetrySafe")
	default:
		problems = append(problems, fmt.Sprintf("--outcome must be Succeeded, Failed or RetrySafe, not %q", o.outcome))
	}
	switch {
	case strings.TrimSpace(o.reason) == "":
		problems = append(problems, "--reason is required: say how you know, for the record")
	case len(o.reason) > maxReasonLength:
		problems = append(problems, fmt.Sprintf("--reason is %d bytes long; at most %d are recorded", len(o.reason), maxReasonLength))
	}
	if len(o.externalRef) > maxExternalRefLength {
		problems = append(problems, fmt.Sprintf("--external-ref is %d bytes long; at most %d are allowed", len(o.externalRef), maxExternalRefLength))
	}
	if problem := nameProblem(o.name, "ToolResolution", maxResolutionNameLength); problem != "" {
		problems = append(problems, problem)
	}
	if o.wait && o.timeout <= 0 {
		problems = append(problems, "--timeout must be positive")
	}
	if len(problems) > 0 {
		return fmt.Errorf("invalid resolution, nothing was created:\n  %s", strings.Join(problems, "\n  "))
	}
	return nil
}

// nameProblem says what is wrong with --name for a record of kind whose
// name has at most limit characters; "" when nothing is (or it is unset).
func nameProblem(name, kind string, limit int) string {
	if name == "" {
		return ""
	}
	if invalid := validation.IsDNS1123Subdomain(name); len(invalid) > 0 {
		return fmt.Sprintf("--name %q cannot name a %s: %s", name, kind, strings.Join(invalid, "; "))
	}
	if len(name) > limit {
		return fmt.Sprintf("--name is %d characters long; a %s's name has at most %d", len(name), kind, limit)
	}
	return ""
}

// resolution is the object `resolve` creates.
func (o resolveOptions) resolution(namespace, key string) *v1alpha1.ToolResolution {
	r := ledgerclient.NewResolution(namespace, key, ledgerclient.Judged{Attempt: o.attempt}, v1alpha1.ResolutionOutcome(o.outcome), o.externalRef, o.reason)
	if o.name != "" {
		r.GenerateName, r.Name = "", o.name
	}
	return r
}

func (c *commandEnv) resolve(ctx context.Context, key string, opts resolveOptions) error {
	if err := opts.validate(); err != nil {
		return err
	}
	namespace, ledger, err := c.connect()
	if err != nil {
		return err
	}
	created, err := ledger.Resolve(ctx, opts.resolution(namespace, key))
	if err != nil {
		return err
	}
	if opts.format == outputText {
		writeCreated(c.streams.Out, created)
	}
	// The controller records the action before it marks the resolution, so
	// once applied the action shows the outcome.
	return report(ctx, c, ledger, created, "ToolResolution", "tres", key, opts.format, opts.wait, opts.timeout,
		func(ctx context.Context) (*v1alpha1.ToolResolution, []metav1.Condition, error) {
			read, err := ledger.GetResolution(ctx, namespace, created.Name)
			if err != nil {
				return nil, nil, err
			}
			return read, read.Status.Conditions, nil
		})
}

// appliedRecord is what a command creates for the controller to apply to
// an action: a ToolResolution or a ToolApproval.
type appliedRecord interface {
	runtime.Object
	metav1.Object
}

// report finishes a command that created record about the action key: it
// prints the record as format asks and, with wait, reads it back (read)
// until its Applied condition is set, for at most timeout, and then the
// action's phase. kind and short (kubectl's short name) name the record.
// A record that was not applied is an error.
func report[T appliedRecord](ctx context.Context, c *commandEnv, l *ledgerclient.Ledger, created T, kind, short, key string, format output, wait bool,
	timeout time.Duration, read func(context.Context) (T, []metav1.Condition, error)) error {
	if !wait {
		if format != outputText {
			return printStructured(c.streams.Out, format, forOutput(created, kind))
		}
		return nil
	}
	latest := created
	applied, err := waitApplied(ctx, kind, short, created.GetNamespace(), created.GetName(), timeout, func(ctx context.Context) ([]metav1.Condition, error) {
		object, conditions, err := read(ctx)
		if err != nil {
			return nil, err
		}
		latest = object
		return conditions, nil
	})
	if err != nil {
		return err
	}
	if format != outputText {
		if err := printStructured(c.streams.Out, format, forOutput(latest, kind)); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(c.streams.Out, "Applied=%s (%s): %s\n", applied.Status, applied.Reason, cell(applied.Message))
	}
	if applied.Status != metav1.ConditionTrue {
		return fmt.Errorf("%s %q was not applied: %s", kind, latest.GetName(), cell(applied.Message))
	}
	if format == outputText {
		after, err := l.GetAction(ctx, created.GetNamespace(), key)
		if err != nil {
			return err
		}
		fmt.Fprintf(c.streams.Out, "ToolAction %s is now %s\n", key, ledgerclient.PhaseOf(after))
	}
	return nil
}

func writeCreated(w io.Writer, r *v1alpha1.ToolResolution) {
	fmt.Fprintf(w, "toolresolution.%s/%s created\n", v1alpha1.GroupVersion.Group, r.Name)
	fmt.Fprintf(w, "  action:       %s\n", r.Spec.ActionName)
	fmt.Fprintf(w, "  attempt:      %d\n", r.Spec.Attempt)
	fmt.Fprintf(w, "  outcome:      %s\n", r.Spec.Outcome)
	if r.Spec.ExternalRef != "" {
		fmt.Fprintf(w, "  external ref: %s\n", cell(r.Spec.ExternalRef))
	}
	fmt.Fprintf(w, "  reason:       %s\n", r.Spec.Reason)
}

// waitApplied reads an object back until its Applied condition is set, for
// at most timeout; read returns the object's conditions. kind and short
// (kubectl's short name) name the object in errors.
func waitApplied(ctx context.Context, kind, short, namespace, name string, timeout time.Duration,
	read func(context.Context) ([]metav1.Condition, error)) (*metav1.Condition, error) {
	waitCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	ticker := time.NewTicker(resolutionPollInterval)
	defer ticker.Stop()
	for {
		conditions, err := read(waitCtx)
		switch {
		case err == nil:
			if applied := meta.FindStatusCondition(conditions, v1alpha1.ConditionApplied); applied != nil {
				return applied, nil
			}
		case waitCtx.Err() == nil:
			return nil, fmt.Errorf("cannot wait for %s %q: %w", kind, name, err)
		}
		select {
		case <-ticker.C:
		case <-waitCtx.Done():
			if ctx.Err() != nil {
				return nil, fmt.Errorf("stopped waiting for %s %q: %w", kind, name, ctx.Err())
			}
			return nil, fmt.Errorf("%s %q has no Applied condition after %s; is the toolledger controller running? (kubectl get %s %s -n %s)",
				kind, name, timeout, short, name, namespace)
		}
	}
}
