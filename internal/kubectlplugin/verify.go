package kubectlplugin

import (
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/spf13/cobra"

	archivev1alpha1 "github.com/toolledger/toolledger/api/archive/v1alpha1"
	"github.com/toolledger/toolledger/internal/ledgerclient"
	"github.com/toolledger/toolledger/internal/printable"
)

func newVerifyCommand(c *commandEnv) *cobra.Command {
	var (
		format        output
		allNamespaces bool
		copiedHead    string
		full          bool
	)
	cmd := &cobra.Command{
		Use:   "verify",
		Short: "Verify that the archived history of a namespace was not altered",
		Long: `Verify the hash chain of the namespace's history in the archive (a manager
with --archive-dsn). Each archived record's hash covers the record and the hash
before it; the manager recomputes the chain when asked, through the archive API
(archivechains.archive.toolledger.dev), which the API server authorizes as you:
your role needs get on archivechains (list, with -A).

The manager goes on from where the last complete verification of the chain
ended, trusting the records before it but checking that the chain still holds
every checkpoint the cluster took of its head; --full reads it from its first
record. A long chain is verified over several requests of at most 20 seconds,
each going on from where the last stopped; verify asks until every chain is
complete, telling its progress on stderr, and an interrupted verification goes
on from where it stopped when asked again.

  VERIFIED      true when the chain holds to its head, and holds every
                checkpoint the cluster took
  FROM          start (the first record) or last (where the last complete
                verification ended)
  RECORDS       records up to the head
  PRUNED        records deleted by the history retention, whose links the
                chain keeps
  BEFORE-CHAIN  records archived before the archive had chains: nothing
                proves them
  CHECKPOINTS   the cluster's checkpoints of the chain that it holds
  HEAD          the newest link, SEQUENCE:HASH: copy it; a later verification
                at the same sequence must show the same hash

A chain that does not hold is named at its first broken record: changed
after it was archived, missing (deleted, not pruned), not following the hash
before it (the chain rewritten from there), or not holding a checkpoint's
hash (rewritten, heads included, up to there). docs/audit.md says what the
chain proves and what it does not.

--head SEQUENCE:HASH checks a head copied earlier (from this command, or
from an event's toolledgerchainhead): the chain must still hold that hash at
that sequence, or it was rewritten up to there (or the records after the
chain's head were deleted with it). A head whose record was pruned inside a
run can no longer be compared, and is reported so.

Exit status: 0 when every chain holds; 1 when one does not, or on an error.`,
		Example: `  kubectl toolledger verify -n shop
  kubectl toolledger verify -n shop --full
  kubectl toolledger verify -n shop --head 1346:3f2a9c0e6b1d…
  kubectl toolledger verify -A -o yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if copiedHead != "" && allNamespaces {
				return fmt.Errorf("--head is one namespace's: give it with -n, not -A")
			}
			namespace, ledger, err := c.connectList(allNamespaces)
			if err != nil {
				return err
			}
			chains, err := ledger.VerifyChains(cmd.Context(), namespace, ledgerclient.VerifyOptions{CopiedHead: copiedHead, Full: full,
				Progress: func(chains []archivev1alpha1.ArchiveChain) { writeProgress(cmd.ErrOrStderr(), chains) }})
			if err != nil {
				return err
			}
			list := struct {
				Items []archivev1alpha1.ArchiveChain `json:"items"`
			}{chains}
			if err := c.printList(format, list, len(chains) == 0, "The archive holds no history in "+ledgerclient.Scope(namespace)+".",
				func(w io.Writer) error { return writeChains(w, chains, allNamespaces) }); err != nil {
				return err
			}
			return brokenChains(chains)
		},
	}
	cmd.Flags().BoolVarP(&allNamespaces, "all-namespaces", "A", false, "Verify the chain of every namespace the archive holds.")
	cmd.Flags().StringVar(&copiedHead, "head", "", "A head copied earlier, SEQUENCE:HASH, that the chain must still hold.")
	cmd.Flags().BoolVar(&full, "full", false, "Read each chain from its first record, not from where the last complete verification ended.")
	addOutputFlag(cmd, &format, "the verifications")
	return cmd
}

// writeProgress tells how far the verifications got that are not complete.
func writeProgress(w io.Writer, chains []archivev1alpha1.ArchiveChain) {
	for _, c := range chains {
		if s := c.Status; !s.Complete && s.Broken == nil {
			fmt.Fprintf(w, "%s: verified through record %d of %d; going on\n", printable.Escape(c.Namespace), s.Head.Sequence, s.Length)
		}
	}
}

func writeChains(w io.Writer, chains []archivev1alpha1.ArchiveChain, allNamespaces bool) error {
	columns := []string{"VERIFIED", "FROM", "RECORDS", "PRUNED", "BEFORE-CHAIN", "CHECKPOINTS", "HEAD"}
	if err := writeTable(w, "verifications", columns, allNamespaces, len(chains), func(i int) (string, []string) {
		s := chains[i].Status
		head := "<empty>"
		if s.Head.Sequence > 0 {
			head = fmt.Sprintf("%d:%s", s.Head.Sequence, s.Head.Hash)
		}
		from := "last"
		if s.Full {
			from = "start"
		}
		return chains[i].Namespace, []string{strconv.FormatBool(s.Verified), from, strconv.FormatInt(s.Records, 10),
			strconv.FormatInt(s.Pruned, 10), strconv.FormatInt(s.Unchained, 10), strconv.Itoa(s.Checkpoints), head}
	}); err != nil {
		return err
	}
	// The namespace, key, uid, problem and hashes are the archive's: a
	// tamperer with the database could have written escape sequences there.
	for _, chain := range chains {
		namespace := printable.Escape(chain.Namespace)
		if b := chain.Status.Broken; b != nil {
			fmt.Fprintf(w, "\n%s: the chain breaks at %s: %s\n", namespace, describeBreak(b), printable.Escape(b.Problem))
		}
		switch c := chain.Status.CopiedHead; {
		case c == nil:
		case c.Result == "Pruned":
			fmt.Fprintf(w, "\n%s: the copied head %d:%s cannot be compared: its record was pruned inside a run, whose last hash alone the chain keeps\n", namespace, c.Sequence, printable.Escape(c.Hash))
		default:
			fmt.Fprintf(w, "\n%s: the copied head %d:%s matches: nothing up to it was rewritten\n", namespace, c.Sequence, printable.Escape(c.Hash))
		}
	}
	return nil
}

// describeBreak names the broken record, "record 17 (key order-17, uid …)",
// its key and uid escaped.
func describeBreak(b *archivev1alpha1.ChainBreak) string {
	if b.Key == "" {
		return fmt.Sprintf("record %d", b.Sequence)
	}
	return fmt.Sprintf("record %d (key %s, uid %s)", b.Sequence, printable.Escape(b.Key), printable.Escape(b.UID))
}

// brokenChains is the command's error when a chain does not hold.
func brokenChains(chains []archivev1alpha1.ArchiveChain) error {
	var errs []error
	for _, chain := range chains {
		if b := chain.Status.Broken; b != nil {
			errs = append(errs, fmt.Errorf("the archived history of namespace %s was altered at %s", printable.Escape(chain.Namespace), describeBreak(b)))
		}
	}
	return errors.Join(errs...)
}
