package kubectlplugin

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/cli-runtime/pkg/printers"

	archivev1alpha1 "github.com/toolledger/toolledger/api/archive/v1alpha1"
	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/ledgerclient"
)

// statusValueWidth bounds a parameter's value in status; -o json|yaml
// carries the whole ToolAction.
const statusValueWidth = 200

func newStatusCommand(c *commandEnv) *cobra.Command {
	var format output
	cmd := &cobra.Command{
		Use:   "status KEY",
		Short: "Show an action's ledger record and its history as a timeline, or its tombstone",
		Long: `Show the ledger record of the ToolAction named KEY in the namespace: phase,
conditions, attempts, the executor claim, the external reference, the request
digest and idempotency key, the error, compensations, every parameter (one
line each, marked where it enters the request digest), and the history as a
timeline, one line per transition, oldest first. When a Tombstone of the key
exists too (the record was deleted and created again), one line names it.

When the record was deleted and its Tombstone keeps the key, it shows the
tombstone: when and why the record was deleted, its outcome, external
reference, error, attempts, completion, tool, request digest, and when the key
is freed (the completion plus the tool's keyRetention).

When the record has left etcd for the archive (a manager with --archive-dsn),
it shows the archived record as it was retired, with one line saying why and
when it left and whether it still keeps its key. It is read through the
archive API (archivedtoolactions.archive.toolledger.dev), which the API server
authorizes as you: your role needs get on archivedtoolactions.

With -o json or -o yaml it prints the ToolAction itself, or the Tombstone, or
the ArchivedToolAction, whichever holds the key (without managedFields).`,
		Example: `  kubectl toolledger status order-1002-charge -n shop
  kubectl toolledger status order-1002-charge -o yaml`,
		Args: keyArg,
		RunE: func(cmd *cobra.Command, args []string) error {
			namespace, ledger, err := c.connect()
			if err != nil {
				return err
			}
			ctx, key := cmd.Context(), args[0]
			action, err := ledger.FindAction(ctx, namespace, key)
			if err != nil {
				return err
			}
			if action != nil {
				if format != outputText {
					return printStructured(c.streams.Out, format, forOutput(action, "ToolAction"))
				}
				var facts statusFacts
				facts.parameters, facts.parametersErr = ledger.Parameters(ctx, action)
				facts.tomb, facts.tombErr = ledger.FindTombstone(ctx, namespace, key)
				return writeStatus(c.streams.Out, action, facts, c.now())
			}
			tomb, err := ledger.FindTombstone(ctx, namespace, key)
			if err != nil {
				return err
			}
			if tomb != nil {
				if format != outputText {
					return printStructured(c.streams.Out, format, forOutput(tomb, "Tombstone"))
				}
				return writeTombstone(c.streams.Out, tomb, ledger.KeyFreed(ctx, tomb), c.now())
			}
			archived, err := ledger.FindArchived(ctx, namespace, key)
			switch {
			case errors.Is(err, ledgerclient.ErrNoArchiveAPI):
				return fmt.Errorf("ToolAction %q not found in namespace %q, and no Tombstone keeps that key", key, namespace)
			case err != nil:
				return err
			case archived == nil:
				return fmt.Errorf("ToolAction %q not found in namespace %q, no Tombstone keeps that key, and the archive holds no record of it", key, namespace)
			case format != outputText:
				return printStructured(c.streams.Out, format, archived)
			}
			action = ledgerclient.ActionOf(archived)
			facts := statusFacts{archive: &archived.Archive}
			facts.parameters, facts.parametersErr = ledger.Parameters(ctx, action)
			return writeStatus(c.streams.Out, action, facts, c.now())
		},
	}
	addOutputFlag(cmd, &format, "the ToolAction, the Tombstone, or the ArchivedToolAction")
	return cmd
}

// keyArg accepts exactly one argument that can name a ToolAction, so that a
// mistyped key fails with a reason instead of a confusing API error.
func keyArg(cmd *cobra.Command, args []string) error {
	if len(args) != 1 {
		return fmt.Errorf("%s takes exactly one KEY, the ToolAction's name; got %d arguments; see '%s --help'",
			cmd.Name(), len(args), cmd.CommandPath())
	}
	if problems := validation.IsDNS1123Subdomain(args[0]); len(problems) > 0 {
		return fmt.Errorf("%q cannot name a ToolAction: %s", args[0], strings.Join(problems, "; "))
	}
	return nil
}

// statusFacts are what status reads beside the record: its parameters,
// marked where they enter the digest, and the key's Tombstone, if any. An
// error says why one could not be read; neither hides the record.
type statusFacts struct {
	parameters    []ledgerclient.Parameter
	parametersErr error
	tomb          *v1alpha1.Tombstone
	tombErr       error
	// archive is set when the record was read from the archive.
	archive *archivev1alpha1.ArchiveInfo
}

// writeStatus prints the record in sections: the summary fields, the
// parameters, the conditions, the history. The fields an operator looks for
// on every record are always printed ("<none>" when empty), so that their
// absence is visible; the others only when the record has them, which is
// also where further facts (an approval, say) belong once the API records
// them. Each section is aligned on its own, so that a long label does not
// widen a table.
func writeStatus(w io.Writer, action *v1alpha1.ToolAction, facts statusFacts, now time.Time) error {
	sections := []func(io.Writer){
		func(tw io.Writer) {
			writeFields(tw, action, now)
			field := fieldWriter(tw)
			switch {
			case facts.tombErr != nil:
				field("Tombstone", fmt.Sprintf("cannot tell: %v", facts.tombErr))
			case facts.tomb != nil:
				field("Tombstone", tombstoneSummary(facts.tomb))
			}
			if facts.archive != nil {
				field("Archived", ledgerclient.DescribeArchive(facts.archive))
			}
		},
		func(tw io.Writer) { writeParameters(tw, facts.parameters, facts.parametersErr) },
		func(tw io.Writer) { writeConditions(tw, action.Status.Conditions) },
		func(tw io.Writer) { writeHistory(tw, &action.Status) },
	}
	for _, section := range sections {
		tw := printers.GetNewTabWriter(w)
		section(tw)
		if err := tw.Flush(); err != nil {
			return fmt.Errorf("cannot write the status: %w", err)
		}
	}
	return nil
}

func writeFields(w io.Writer, action *v1alpha1.ToolAction, now time.Time) {
	s := &action.Status
	field := fieldWriter(w)
	orNone := func(value string) string {
		if value == "" {
			return "<none>"
		}
		return value
	}

	field("Name", action.Name)
	field("Namespace", action.Namespace)
	field("Tool", ledgerclient.ToolName(action.Spec.ToolRef))
	field("Phase", string(ledgerclient.PhaseOf(action)))
	requestedBy := "<unstamped> (the identity admission policies are not installed)"
	if user := action.Annotations[v1alpha1.RequestedByAnnotation]; user != "" {
		requestedBy = user + " (verified: stamped by the API server)"
	}
	field("Requested by", requestedBy)
	if p := action.Spec.Provenance; p != nil && len(p.Principals) > 0 {
		field("Principals", strings.Join(p.Principals, ", ")+" (claimed by the caller)")
	}
	if a := s.Approval; a != nil {
		field("Approval", fmt.Sprintf("%s by %s at %s (ToolApproval %s, request %s)",
			a.Decision, a.DecidedBy, timestamp(a.Time), a.Name, a.RequestDigest))
	}
	field("Created", timestamp(action.CreationTimestamp)+" ("+age(now, action.CreationTimestamp)+" ago)")
	if action.DeletionTimestamp != nil {
		field("Deletion requested", timestamp(*action.DeletionTimestamp)+"; the record stays until its outcome is known")
	}
	field("Idempotency key", orNone(s.IdempotencyKey))
	field("Request digest", orNone(s.RequestDigest))
	field("Attempts", strconv.Itoa(int(s.Attempts)))
	claim := "<none>"
	if s.Claim != nil {
		claim = fmt.Sprintf("executor %s, attempt %d, lease expiry %s (%s)",
			s.Claim.Executor, s.Claim.Attempt, timestamp(s.Claim.LeaseExpiry), relative(now, s.Claim.LeaseExpiry))
	}
	field("Claim", claim)
	if s.NextAttemptTime != nil {
		field("Next attempt", timestamp(*s.NextAttemptTime)+" ("+relative(now, *s.NextAttemptTime)+")")
	}
	if s.UnknownSince != nil {
		field("Unknown since", timestamp(*s.UnknownSince)+" ("+age(now, *s.UnknownSince)+" ago)")
		field("Lookups", strconv.Itoa(int(s.Lookups)))
	}
	ref := cell(s.ExternalRef)
	if s.ReplayedByDownstream {
		ref += " (the downstream replayed its stored response: it deduplicated)"
	}
	field("External ref", ref)
	errorText := "<none>"
	if s.Error != nil {
		errorText = fmt.Sprintf("%s (%s): %s", s.Error.Class, s.Error.Reason, cell(s.Error.Message))
	}
	field("Error", errorText)
	if s.CompletionTime != nil {
		field("Completed", timestamp(*s.CompletionTime))
	}
	if action.Spec.Compensates != "" {
		field("Compensates", action.Spec.Compensates)
	}
	field("Compensated by", orNone(strings.Join(s.CompensatedBy, ", ")))
}

// writeParameters lists every parameter, one leaf a line, and whether it
// enters the request digest: an approval binds the digest, and the others
// are sent as they are.
func writeParameters(w io.Writer, parameters []ledgerclient.Parameter, err error) {
	fmt.Fprintln(w, "Parameters (all are sent; IN-DIGEST says which enter the request digest, which an approval binds):")
	switch {
	case err != nil:
		fmt.Fprintf(w, "  cannot tell: %v\n", err)
		return
	case len(parameters) == 0:
		fmt.Fprintln(w, "  <none>")
		return
	}
	fmt.Fprintln(w, "  PARAMETER\tIN-DIGEST\tVALUE")
	for _, p := range parameters {
		fmt.Fprintf(w, "  %s\t%s\t%s\n", cell(p.Path), digestMark(p), cell(shorten(string(p.Value), statusValueWidth)))
	}
}

func writeConditions(w io.Writer, conditions []metav1.Condition) {
	fmt.Fprintln(w, "Conditions:")
	if len(conditions) == 0 {
		fmt.Fprintln(w, "  <none>")
		return
	}
	fmt.Fprintln(w, "  TYPE\tSTATUS\tREASON\tMESSAGE")
	for _, c := range conditions {
		fmt.Fprintf(w, "  %s\t%s\t%s\t%s\n", cell(c.Type), cell(string(c.Status)), cell(c.Reason), cell(c.Message))
	}
}

// writeHistory prints the timeline, one line per transition, oldest first.
func writeHistory(w io.Writer, s *v1alpha1.ToolActionStatus) {
	heading := "History (oldest first):"
	if s.DroppedTransitions > 0 {
		heading = fmt.Sprintf("History (oldest first; %d older transitions dropped):", s.DroppedTransitions)
	}
	fmt.Fprintln(w, heading)
	if len(s.History) == 0 {
		fmt.Fprintln(w, "  <none>")
		return
	}
	fmt.Fprintln(w, "  TIME\tTRANSITION\tREASON\tATTEMPT\tEXECUTOR\tMESSAGE")
	for _, t := range s.History {
		from := string(t.From)
		if from == "" {
			from = "(new)"
		}
		fmt.Fprintf(w, "  %s\t%s → %s\t%s\t%d\t%s\t%s\n",
			timestamp(t.Time), cell(from), cell(string(t.To)), cell(t.Reason), t.Attempt, cell(t.Executor), cell(t.Message))
	}
}

// tombstoneSummary is the line of status that names the tombstone of a
// record created again: what the key's deleted record did.
func tombstoneSummary(tomb *v1alpha1.Tombstone) string {
	r := &tomb.Record
	text := fmt.Sprintf("tombstone/%s keeps what the key's deleted record did: %s", tomb.Name, outcomeOf(r))
	if r.ExternalRef != "" {
		text += ", external ref " + cell(r.ExternalRef)
	}
	return fmt.Sprintf("%s, completed %s; deleted %s (cause %s)", text, timestamp(r.CompletionTime), timestamp(r.DeletionTime), r.Cause)
}

// writeTombstone prints the tombstone of a deleted record, with the
// fields of writeFields that the tombstone keeps.
func writeTombstone(w io.Writer, tomb *v1alpha1.Tombstone, freed ledgerclient.KeyFreed, now time.Time) error {
	r := &tomb.Record
	tw := printers.GetNewTabWriter(w)
	field := fieldWriter(tw)
	field("Name", tomb.Name)
	field("Namespace", tomb.Namespace)
	field("Record", "deleted; this is its Tombstone, which keeps the key")
	field("Deleted", timestamp(r.DeletionTime)+" ("+age(now, r.DeletionTime)+" ago)")
	field("Cause", ledgerclient.DescribeCause(r.Cause))
	if r.DeletedBy != "" {
		field("Deleted by", r.DeletedBy)
	}
	field("Outcome", string(r.Phase))
	field("External ref", cell(r.ExternalRef))
	errorText := "<none>"
	if r.ErrorClass != "" {
		errorText = string(r.ErrorClass)
		if r.ErrorReason != "" {
			errorText += " (" + r.ErrorReason + ")"
		}
	}
	field("Error", errorText)
	field("Attempts", strconv.Itoa(int(r.Attempts)))
	field("Completed", timestamp(r.CompletionTime)+" ("+age(now, r.CompletionTime)+" ago)")
	field("Tool", ledgerclient.ToolName(r.ToolRef))
	class := string(r.IdempotencyClass)
	if class == "" {
		class = "<unknown>"
	}
	field("Idempotency class", class)
	field("Request digest", r.RequestDigest)
	field("Key freed", describeFreed(freed, now))
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("cannot write the tombstone: %w", err)
	}
	_, err := fmt.Fprintln(w, "Until the key is freed, a ToolAction created again under it is not dispatched:\n"+
		"the same request shows this outcome, another fails with DuplicateConflict.")
	if err != nil {
		return fmt.Errorf("cannot write the tombstone: %w", err)
	}
	return nil
}

// outcomeOf is a deleted record's phase, with the error class of a failure.
func outcomeOf(r *v1alpha1.TombstoneRecord) string {
	if r.ErrorClass == "" {
		return string(r.Phase)
	}
	return string(r.Phase) + " (" + string(r.ErrorClass) + ")"
}

// digestMark is how status marks a parameter in the IN-DIGEST column.
func digestMark(p ledgerclient.Parameter) string {
	if p.InDigest {
		return "yes"
	}
	return "no"
}
