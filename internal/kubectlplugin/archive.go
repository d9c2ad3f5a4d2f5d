package kubectlplugin

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/archivefinding"
)

// archiveStatus is what `archive status` prints.
type archiveStatus struct {
	// Archive is the identity of the archive the ledger keeps its keys in,
	// and State the binding's (InUse, Decommissioned).
	Archive string `json:"archive"`
	State   string `json:"state"`
	// Behind is what the managers found of the archive going behind the
	// records that left etcd; nil while it holds them.
	Behind *archivefinding.Finding `json:"behind,omitempty"`
	// Acknowledgements are the operators' acknowledgements of a loss.
	Acknowledgements []v1alpha1.ArchiveAcknowledgement `json:"acknowledgements"`
}

func newArchiveCommand(c *commandEnv) *cobra.Command {
	operatorNamespace := "toolledger-system"
	cmd := &cobra.Command{
		Use:   "archive",
		Short: "Show whether the archive holds every record that left etcd, and acknowledge what it lost",
		Long: `With an archive, a record leaves etcd only once its row is durable, and the
cluster keeps a mark of each namespace's archived chain that only moves forward.
An archive restored from a backup or to a point in time, or failed over to a
standby that lagged, keeps its identity but lacks the newest records: their keys
are free in it again. The managers find it behind the marks, hold every new
action of those namespaces (reason ArchiveBehind), keep none of their records,
and are not ready, until the archive catches up (the right server or backup
restored) or an operator acknowledges the loss.

  archive status       what the managers found, and the acknowledgements so far
  archive acknowledge  accept the loss: the managers serve the archive as it is,
                       and the acknowledgement says which records were lost

Reading the status takes get on the ConfigMap toolledger-archive of the
manager's namespace (the Role toolledger-archive-status); acknowledging takes
create on archiveacknowledgements (the toolledger-history-admin ClusterRole).`,
		Example: `  kubectl toolledger archive status
  kubectl toolledger archive acknowledge --reason "restored to the base backup of 06:00; the WAL after it is lost" --wait`,
		Args: cobra.NoArgs,
	}
	cmd.PersistentFlags().StringVar(&operatorNamespace, "operator-namespace", operatorNamespace, "The manager's namespace, which holds the archive binding.")
	var format output
	status := &cobra.Command{
		Use:   "status",
		Short: "Show what the managers found of the archive, and the acknowledgements so far",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := c.archiveStatus(cmd.Context(), operatorNamespace)
			if err != nil {
				return err
			}
			if format != outputText {
				return printStructured(c.streams.Out, format, s)
			}
			return writeArchiveStatus(c.streams.Out, s, c.now())
		},
	}
	addOutputFlag(status, &format, "the status")
	var (
		reason, finding string
		wait            bool
		timeout         = time.Minute
	)
	acknowledge := &cobra.Command{
		Use:   "acknowledge --reason TEXT [--finding DIGEST] [--wait]",
		Short: "Accept what the archive lost, so that the managers serve it as it is",
		Long: `Create an ArchiveAcknowledgement of the finding the managers hold now: the
namespaces whose archived chain no longer holds the records that left etcd.
Once applied, each chain goes on from the head the archive holds, the loss is
recorded beside its checkpoints, the held actions are checked again, and the
acknowledgement's status lists the records lost: their keys are free again, so
an intent applied again under one is dispatched. Restore what can be restored
first (the right server, a later backup, the WAL): an archive that catches up
needs no acknowledgement.

--finding names the finding you reviewed (its digest, as archive status shows
it); without it, the current one. A finding that changed meanwhile is not
acknowledged.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return c.acknowledge(cmd.Context(), operatorNamespace, finding, reason, wait, timeout)
		},
	}
	acknowledge.Flags().StringVar(&reason, "reason", "", "Why the loss is accepted, what was restored and what could not be (required).")
	acknowledge.Flags().StringVar(&finding, "finding", "", "The digest of the finding you reviewed (archive status); the current one when empty.")
	acknowledge.Flags().BoolVar(&wait, "wait", false, "Wait until the managers apply it; exit 1 when it is not applied.")
	acknowledge.Flags().DurationVar(&timeout, "timeout", timeout, "How long --wait waits.")
	cmd.AddCommand(status, acknowledge)
	return cmd
}

func (c *commandEnv) archiveStatus(ctx context.Context, operatorNamespace string) (*archiveStatus, error) {
	cfg, err := c.config.ToRESTConfig()
	if err != nil {
		return nil, fmt.Errorf("cannot load the kubeconfig: %w", err)
	}
	core, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	cm, err := core.CoreV1().ConfigMaps(operatorNamespace).Get(ctx, archivefinding.BindingConfigMap, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("cannot read the archive binding (ConfigMap %s/%s): %w", operatorNamespace, archivefinding.BindingConfigMap, err)
	}
	s := &archiveStatus{Archive: cm.Data["archive"], State: cm.Data["state"]}
	if raw := cm.Data[archivefinding.BindingKey]; raw != "" {
		s.Behind = &archivefinding.Finding{}
		if err := json.Unmarshal([]byte(raw), s.Behind); err != nil {
			return nil, fmt.Errorf("the archive binding holds an unreadable finding: %w", err)
		}
	}
	ledger, err := c.ledger()
	if err != nil {
		return nil, err
	}
	if s.Acknowledgements, err = ledger.ListAcknowledgements(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

func writeArchiveStatus(w io.Writer, s *archiveStatus, now time.Time) error {
	fmt.Fprintf(w, "Archive:  %s (%s)\n", s.Archive, s.State)
	if s.Behind == nil {
		fmt.Fprintln(w, "Behind:   no: the archive holds every record that left etcd, as far as the managers' marks say")
	} else {
		fmt.Fprintf(w, "Behind:   yes, found %s by %s\n", s.Behind.DetectedAt.UTC().Format(time.RFC3339), s.Behind.DetectedBy)
		fmt.Fprintf(w, "Finding:  %s\n", s.Behind.Digest)
		tw := tabwriter.NewWriter(w, 0, 4, 3, ' ', 0)
		fmt.Fprintln(tw, "  NAMESPACE\tMARK\tARCHIVE-HEAD\tLOST\tLAST-RETIRED")
		for _, n := range s.Behind.Namespaces {
			fmt.Fprintf(tw, "  %s\t%d\t%d\t%s\t%s\n", n.Namespace, n.MarkSequence, n.HeadSequence, n.Lost(), n.MarkTime.UTC().Format(time.RFC3339))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintln(w, "New actions of these namespaces wait (ArchiveBehind). Restore what can be restored, then:")
		fmt.Fprintf(w, "  kubectl toolledger archive acknowledge --finding %s --reason TEXT --wait\n", s.Behind.Digest)
	}
	if len(s.Acknowledgements) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 3, ' ', 0)
	fmt.Fprintln(tw, "ACKNOWLEDGEMENT\tAPPLIED\tLOST\tACKNOWLEDGED-BY\tAGE")
	for _, a := range s.Acknowledgements {
		applied := "-"
		if c := meta.FindStatusCondition(a.Status.Conditions, v1alpha1.ConditionApplied); c != nil {
			applied = string(c.Status) + " (" + c.Reason + ")"
		}
		lost := make([]string, 0, len(a.Status.Lost))
		for _, l := range a.Status.Lost {
			lost = append(lost, fmt.Sprintf("%s %d-%d", l.Namespace, l.FromSequence, l.ToSequence))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", a.Name, applied, cell(strings.Join(lost, ", ")), cell(a.Annotations["toolledger.dev/acknowledged-by"]),
			age(now, a.CreationTimestamp))
	}
	return tw.Flush()
}

func (c *commandEnv) acknowledge(ctx context.Context, operatorNamespace, finding, reason string, wait bool, timeout time.Duration) error {
	switch {
	case strings.TrimSpace(reason) == "":
		return fmt.Errorf("--reason is required: say why the loss is accepted, for the record; nothing was created")
	case len(reason) > maxReasonLength:
		return fmt.Errorf("--reason is %d bytes long; at most %d are recorded; nothing was created", len(reason), maxReasonLength)
	}
	s, err := c.archiveStatus(ctx, operatorNamespace)
	if err != nil {
		return err
	}
	switch {
	case s.Behind == nil:
		return fmt.Errorf("the managers hold no finding against archive %s: nothing to acknowledge; nothing was created", s.Archive)
	case finding != "" && finding != s.Behind.Digest:
		return fmt.Errorf("the finding is %s now (%s), not %s: review it again (kubectl toolledger archive status); nothing was created",
			s.Behind.Digest, s.Behind.Summary(), finding)
	}
	ledger, err := c.ledger()
	if err != nil {
		return err
	}
	created, err := ledger.Acknowledge(ctx, s.Archive, s.Behind.Digest, reason)
	if err != nil {
		return err
	}
	fmt.Fprintf(c.streams.Out, "archiveacknowledgement.%s/%s created: archive %s, finding %s (%s)\n", v1alpha1.GroupVersion.Group, created.Name,
		s.Archive, s.Behind.Digest, s.Behind.Summary())
	if !wait {
		return nil
	}
	var latest *v1alpha1.ArchiveAcknowledgement
	applied, err := waitApplied(ctx, "ArchiveAcknowledgement", "archiveack", "", created.Name, timeout, func(ctx context.Context) ([]metav1.Condition, error) {
		read, err := ledger.GetAcknowledgement(ctx, created.Name)
		if err != nil {
			return nil, err
		}
		latest = read
		return read.Status.Conditions, nil
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(c.streams.Out, "Applied=%s (%s): %s\n", applied.Status, applied.Reason, cell(applied.Message))
	if applied.Status != metav1.ConditionTrue {
		return fmt.Errorf("ArchiveAcknowledgement %q was not applied: %s", created.Name, cell(applied.Message))
	}
	for _, l := range latest.Status.Lost {
		fmt.Fprintf(c.streams.Out, "Lost: namespace %s, records %d to %d\n", l.Namespace, l.FromSequence, l.ToSequence)
	}
	return nil
}
