package archive

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// A mark is the newest link of a namespace's chain whose record may have
// left etcd: the cluster keeps it (internal/chainstate), and the archive
// must hold it. An archive that does not (failed over to a standby that
// lagged, restored from a backup or to a point in time, another database)
// has lost keys that nothing else keeps: it is behind, and answers no key
// check and keeps no record of the namespace until an operator
// acknowledges what it lost.

// ErrBehind is the answer of a key check or a keep in a namespace whose
// archived chain does not hold the cluster's mark (a *BehindError).
var ErrBehind = errors.New("the archive is behind the records that left etcd")

// BehindError says how the archive went behind a namespace's mark.
type BehindError struct {
	Namespace string
	// Mark is the cluster's mark; Head the archive's head of the chain.
	Mark, Head Link
}

func (e *BehindError) Error() string {
	if e.Head.Sequence >= e.Mark.Sequence {
		return fmt.Sprintf("the archive's chain of namespace %s does not hold record %d as the cluster recorded it when that record left etcd (its head is record %d): "+
			"the database was restored or failed over, and records were archived again since", e.Namespace, e.Mark.Sequence, e.Head.Sequence)
	}
	return fmt.Sprintf("the archive's chain of namespace %s ends at record %d, but records up to %d left etcd for it: "+
		"the database was restored or failed over to a copy that lacks the newest records", e.Namespace, e.Head.Sequence, e.Mark.Sequence)
}

// Is makes a *BehindError ErrBehind.
func (e *BehindError) Is(target error) bool { return target == ErrBehind }

// Holding is what the archive holds of one namespace's mark.
type Holding struct {
	// Head is the namespace's chain's head.
	Head Link
	// Held is whether the chain holds the mark: its record (or the end of
	// a pruned run) at the mark's sequence has the mark's hash, or was
	// pruned inside a run, which only a chain that held it can have.
	Held bool
}

// Behind is the holding as an error; nil when the mark is held.
func (h Holding) Behind(namespace string, mark Link) error {
	if h.Held {
		return nil
	}
	return &BehindError{Namespace: namespace, Mark: mark, Head: h.Head}
}

// holdingColumns reads, for the namespace $ns and the mark's sequence
// $seq, the chain's head and the hash the chain keeps at the mark: its
// record's, the last hash of the pruned run it ends, empty inside a pruned
// run, NULL when nothing keeps it.
func holdingColumns(ns, seq string) string {
	return `coalesce((SELECT seq FROM toolledger_chain_heads WHERE namespace = ` + ns + `), 0),
	coalesce((SELECT hash FROM toolledger_chain_heads WHERE namespace = ` + ns + `), ''),
	(SELECT chain_hash FROM toolledger_records WHERE namespace = ` + ns + ` AND chain_seq = ` + seq + `
	UNION ALL SELECT CASE WHEN last_seq = ` + seq + ` THEN last_hash ELSE '' END FROM toolledger_chain_pruned
	WHERE namespace = ` + ns + ` AND first_seq <= ` + seq + ` AND last_seq >= ` + seq + `
	LIMIT 1)`
}

// holding judges what holdingColumns read of mark.
func holding(mark Link, head Link, kept *string) Holding {
	h := Holding{Head: head}
	switch {
	case mark.Sequence == 0:
		h.Held = true
	case kept == nil || head.Sequence < mark.Sequence:
	default:
		h.Held = *kept == "" || *kept == mark.Hash
	}
	return h
}

// Holds reads, for each namespace's mark, whether the archive holds it,
// in one query however many namespaces there are.
func (s *Store) Holds(ctx context.Context, marks map[string]Link) (map[string]Holding, error) {
	namespaces, sequences := make([]string, 0, len(marks)), make([]int64, 0, len(marks))
	for ns, mark := range marks {
		namespaces, sequences = append(namespaces, ns), append(sequences, mark.Sequence)
	}
	held := make(map[string]Holding, len(marks))
	err := s.readHoldings(ctx, namespaces, sequences, func(ns string, _ int64, head Link, kept *string) {
		held[ns] = holding(marks[ns], head, kept)
	})
	if err != nil {
		return nil, fmt.Errorf("%w: cannot compare the archive's chains with the cluster's marks: %w", ErrUnavailable, err)
	}
	return held, nil
}

// HeldLinks reads which of links, of namespace's chain, the archive holds,
// in one query.
func (s *Store) HeldLinks(ctx context.Context, namespace string, links []Link) (map[Link]bool, error) {
	namespaces, sequences := make([]string, 0, len(links)), make([]int64, 0, len(links))
	for _, l := range links {
		namespaces, sequences = append(namespaces, namespace), append(sequences, l.Sequence)
	}
	kept := map[int64]*string{}
	var head Link
	err := s.readHoldings(ctx, namespaces, sequences, func(_ string, seq int64, h Link, hash *string) {
		head, kept[seq] = h, hash
	})
	if err != nil {
		return nil, fmt.Errorf("%w: cannot read which links of namespace %s's chain the archive holds: %w", ErrUnavailable, namespace, err)
	}
	held := make(map[Link]bool, len(links))
	for _, l := range links {
		held[l] = holding(l, head, kept[l.Sequence]).Held
	}
	return held, nil
}

// readHoldings reads holdingColumns for each pair of namespaces[i] and
// sequences[i], in one query, and hands each pair's to each.
func (s *Store) readHoldings(ctx context.Context, namespaces []string, sequences []int64, each func(namespace string, seq int64, head Link, kept *string)) error {
	rows, err := s.keys.Query(ctx, `SELECT m.namespace, m.seq, `+holdingColumns("m.namespace", "m.seq")+`
FROM unnest($1::text[], $2::bigint[]) AS m(namespace, seq)`, namespaces, sequences)
	if err == nil {
		var (
			ns   string
			seq  int64
			head Link
			kept *string
		)
		_, err = pgx.ForEachRow(rows, []any{&ns, &seq, &head.Sequence, &head.Hash, &kept}, func() error {
			each(ns, seq, head, kept)
			return nil
		})
	}
	observe("check", err)
	return err
}
