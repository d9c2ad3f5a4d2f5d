package kubectlplugin

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/ledgerclient"
)

// livesList is what `lives` prints: the earlier lives that hold the
// namespace's keys, and the decisions made about them.
type livesList struct {
	Namespace string                         `json:"namespace"`
	Held      []ledgerclient.HeldLife        `json:"held"`
	Decisions []v1alpha1.EarlierLifeDecision `json:"decisions"`
}

func newLivesCommand(c *commandEnv) *cobra.Command {
	var format output
	cmd := &cobra.Command{
		Use:   "lives",
		Short: "List the earlier lives of a namespace that hold its keys, and decide about them",
		Long: `A namespace deleted and created again under its name (restored from a backup
by Velero or the like, re-created by GitOps, or given to a new tenant) has a new
uid: a life of its own. The archive tells the lives apart, and holds every
action of the namespace whose key an earlier life guards (reason
EarlierNamespaceKey): it is neither dispatched, which could repeat a restored
tenant's effects, nor answered, which would show one tenant another's outcomes,
until someone decides.

  lives adopt    the namespace's owner makes the earlier life's history the
                 namespace's: its records answer the namespace's keys (a restore)
  lives release  an administrator frees the earlier life's keys for the
                 namespace, which never sees its outcomes (a new tenant)

Each decision is an EarlierLifeDecision in the namespace, bound by the API
server to the namespace's life and to who created it (toolledger.dev/decided-by).
Without a subcommand, lives lists the earlier lives that hold actions of the
namespace, with the keys they hold, and the decisions made.`,
		Example: `  kubectl toolledger lives -n shop
  kubectl toolledger lives adopt -n shop --reason "restored from the backup of 2026-12-06"
  kubectl toolledger lives release -n shop --earlier-life 6f1c… --reason "the name was given to a new tenant"`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			namespace, ledger, err := c.connect()
			if err != nil {
				return err
			}
			list, err := readLives(cmd.Context(), ledger, namespace)
			if err != nil {
				return err
			}
			return c.printList(format, list, len(list.Held) == 0 && len(list.Decisions) == 0,
				fmt.Sprintf("No earlier life of namespace %q holds keys of it, and none was decided about.", namespace),
				func(w io.Writer) error { return writeLives(w, list, c.now()) })
		},
	}
	addOutputFlag(cmd, &format, "the held lives and the decisions")
	cmd.AddCommand(newLifeDecisionCommand(c, v1alpha1.LifeAdopt), newLifeDecisionCommand(c, v1alpha1.LifeRelease))
	return cmd
}

func readLives(ctx context.Context, ledger *ledgerclient.Ledger, namespace string) (livesList, error) {
	held, err := ledger.HeldLives(ctx, namespace)
	if err != nil {
		return livesList{}, err
	}
	decisions, err := ledger.ListDecisions(ctx, namespace)
	return livesList{Namespace: namespace, Held: held, Decisions: decisions}, err
}

func writeLives(w io.Writer, list livesList, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 3, ' ', 0)
	if len(list.Held) > 0 {
		fmt.Fprintln(tw, "EARLIER-LIFE\tHELD-KEYS\tKEYS")
		for _, h := range list.Held {
			fmt.Fprintf(tw, "%s\t%d\t%s\n", lifeName(h.Life), len(h.Keys), cell(strings.Join(h.Keys, ",")))
		}
	}
	if len(list.Decisions) > 0 {
		if len(list.Held) > 0 {
			fmt.Fprintln(tw)
		}
		fmt.Fprintln(tw, "DECISION\tEARLIER-LIFE\tDECIDED\tAPPLIED\tDECIDED-BY\tAGE")
		for _, d := range list.Decisions {
			applied := "-"
			if c := meta.FindStatusCondition(d.Status.Conditions, v1alpha1.ConditionApplied); c != nil {
				applied = string(c.Status) + " (" + c.Reason + ")"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", d.Name, lifeName(d.Spec.EarlierLife), d.Spec.Decision, applied,
				cell(d.Annotations["toolledger.dev/decided-by"]), age(now, d.CreationTimestamp))
		}
	}
	return tw.Flush()
}

func lifeName(life types.UID) string {
	if life == "" {
		return `""` + " (before the archive kept uids)"
	}
	return string(life)
}

// lifeOptions are the flags of `lives adopt` and `lives release`.
type lifeOptions struct {
	earlier []string
	reason  string
	wait    bool
	timeout time.Duration
}

func newLifeDecisionCommand(c *commandEnv, decision v1alpha1.LifeDecision) *cobra.Command {
	opts := lifeOptions{timeout: time.Minute}
	use, short, long := "adopt", "Make an earlier life's history the namespace's, as its owner", `Adopt the history of earlier lives of the namespace's name: their archived
records answer the namespace's keys, as they would have in that life, and the
actions they held are settled from them (SettledByArchive) or refused as
conflicts, never dispatched again. This is what a namespace restored from a
backup, or re-created by GitOps, by the same tenant needs. Adopting shows the
namespace that life's outcomes: do it only for a life that was yours.

Without --earlier-life it adopts every earlier life that holds actions of the
namespace now, as 'kubectl toolledger lives' lists them.`
	if decision == v1alpha1.LifeRelease {
		use, short, long = "release", "Free an earlier life's keys for the namespace, as an administrator", `Release an earlier life of the namespace's name: its archived keys are free for
the namespace, whose actions under them are new intents, dispatched; the
namespace never sees that life's outcomes. This is what a name given to a new
tenant needs; for a restored namespace it would repeat the effects of every
intent applied again. It takes the verb release on earlierlifedecisions (the
toolledger-history-admin ClusterRole). --earlier-life is required.`
	}
	cmd := &cobra.Command{
		Use:   use + " [--earlier-life UID]... --reason TEXT [--wait]",
		Short: short,
		Long:  long,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return c.decideLife(cmd.Context(), decision, opts)
		},
	}
	cmd.Flags().StringArrayVar(&opts.earlier, "earlier-life", nil, "The uid of the earlier life, as 'kubectl toolledger lives' and the held actions name it (\"\" for records archived before the archive kept uids); repeatable.")
	cmd.Flags().StringVar(&opts.reason, "reason", "", "Why, for the record (required).")
	cmd.Flags().BoolVar(&opts.wait, "wait", false, "Wait until the controller sets each decision's Applied condition; exit 1 when one is False.")
	cmd.Flags().DurationVar(&opts.timeout, "timeout", opts.timeout, "How long --wait waits for each Applied condition.")
	return cmd
}

func (c *commandEnv) decideLife(ctx context.Context, decision v1alpha1.LifeDecision, opts lifeOptions) error {
	switch {
	case strings.TrimSpace(opts.reason) == "":
		return fmt.Errorf("--reason is required: say why, for the record; nothing was created")
	case len(opts.reason) > maxReasonLength:
		return fmt.Errorf("--reason is %d bytes long; at most %d are recorded; nothing was created", len(opts.reason), maxReasonLength)
	case decision == v1alpha1.LifeRelease && len(opts.earlier) == 0:
		return fmt.Errorf("--earlier-life is required: releasing frees keys, so name each life you release; nothing was created")
	}
	namespace, ledger, err := c.connect()
	if err != nil {
		return err
	}
	lives := make([]types.UID, 0, len(opts.earlier))
	for _, l := range opts.earlier {
		lives = append(lives, types.UID(l))
	}
	if len(lives) == 0 {
		held, err := ledger.HeldLives(ctx, namespace)
		if err != nil {
			return err
		}
		for _, h := range held {
			lives = append(lives, h.Life)
		}
		if len(lives) == 0 {
			return fmt.Errorf("no earlier life holds actions of namespace %q now: name one with --earlier-life; nothing was created", namespace)
		}
	}
	current := c.namespaceUID(ctx, namespace)
	for _, life := range lives {
		created, err := ledger.DecideEarlierLife(ctx, namespace, current, life, decision, opts.reason)
		if err != nil {
			return err
		}
		fmt.Fprintf(c.streams.Out, "earlierlifedecision.%s/%s created: %s earlier life %s of namespace %s\n", v1alpha1.GroupVersion.Group, created.Name,
			decision, lifeName(life), namespace)
		if !opts.wait {
			continue
		}
		applied, err := waitApplied(ctx, "EarlierLifeDecision", "eld", namespace, created.Name, opts.timeout, func(ctx context.Context) ([]metav1.Condition, error) {
			read, err := ledger.GetDecision(ctx, namespace, created.Name)
			if err != nil {
				return nil, err
			}
			return read.Status.Conditions, nil
		})
		if err != nil {
			return err
		}
		fmt.Fprintf(c.streams.Out, "Applied=%s (%s): %s\n", applied.Status, applied.Reason, cell(applied.Message))
		if applied.Status != metav1.ConditionTrue {
			return fmt.Errorf("EarlierLifeDecision %q was not applied: %s", created.Name, cell(applied.Message))
		}
	}
	return nil
}

// namespaceUID is the uid of namespace, when the user may read it; "" lets
// the API server set the decision's life (the toolledger-earlier-life
// admission policy).
func (c *commandEnv) namespaceUID(ctx context.Context, namespace string) types.UID {
	cfg, err := c.config.ToRESTConfig()
	if err != nil {
		return ""
	}
	core, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return ""
	}
	ns, err := core.CoreV1().Namespaces().Get(ctx, namespace, metav1.GetOptions{})
	if err != nil {
		return ""
	}
	return ns.UID
}
