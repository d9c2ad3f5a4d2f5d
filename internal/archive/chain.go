package archive

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/toolledger/toolledger/pkg/digest"
)

// chainLock is the first key of the advisory lock an append to a
// namespace's chain holds (the second is the namespace's hash): "tlch".
const chainLock int32 = 0x746c6368

// The versions of the document a link hashes, named inside it. Version 2
// adds the namespace's uid and the time the record was archived, which the
// key check and verification read; a record archived without a namespace
// uid was linked with version 1.
const (
	chainVersion1 = 1
	chainVersion2 = 2
)

// Link is a record's place in its namespace's chain: its sequence number
// (from 1, without gaps) and its hash, which covers the record and the
// previous record's hash. Sequence 0 is the empty chain, or a record
// archived before the archive had chains.
type Link struct {
	Sequence int64  `json:"sequence"`
	Hash     string `json:"hash"`
}

// chainHead is the namespace's newest link, as the heads table keeps it
// apart from the records: a deleted newest record leaves it in place. The
// zero Link for an empty chain.
func chainHead(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, namespace string) (Link, error) {
	var head Link
	err := q.QueryRow(ctx, `SELECT seq, hash FROM toolledger_chain_heads WHERE namespace = $1`, namespace).Scan(&head.Sequence, &head.Hash)
	if errors.Is(err, pgx.ErrNoRows) {
		return Link{}, nil
	}
	return head, err
}

// next is the link of r appended after l; actionText is r.Action as the
// database keeps it.
func (l Link) next(r *Record, actionText string) (Link, error) {
	hash, err := linkHash(l.Sequence+1, l.Hash, r, actionText)
	return Link{Sequence: l.Sequence + 1, Hash: hash}, err
}

// chainTime spells a column's time to the microsecond it keeps.
func chainTime(t time.Time) string {
	return t.UTC().Truncate(time.Microsecond).Format("2006-01-02T15:04:05.000000Z")
}

// member is a member of a chain document's record.
type member struct {
	name  string
	value any
}

// linkHash is the hex SHA-256 of the RFC 8785 canonical JSON of the
// record's chain document: {"chain": version, "sequence": sequence,
// "previous": previous, "record": {…}}, whose record holds every column of
// the record (version 1: but the namespace's uid and the time it was
// archived), with the action as the text the database keeps of it
// (actionText). The document is written straight into the hash, its members
// in canonical order: an action may be as large as etcd let it be, and is
// never copied.
func linkHash(sequence int64, previous string, r *Record, actionText string) (string, error) {
	record := []member{
		{"action", actionText}, {"attempts", int64(r.Attempts)}, {"cause", r.Cause}, {"completionTime", chainTime(r.CompletionTime)},
		{"deletedBy", r.DeletedBy}, {"deletionTime", chainTime(r.DeletionTime)}, {"errorClass", string(r.ErrorClass)},
		{"errorReason", r.ErrorReason}, {"externalRef", r.ExternalRef}, {"guardsKey", r.GuardsKey},
		{"idempotencyClass", string(r.IdempotencyClass)}, {"key", r.Key}, {"namespace", r.Namespace}, {"phase", string(r.Phase)},
		{"requestDigest", r.RequestDigest}, {"toolKind", r.Tool.Kind}, {"toolName", r.Tool.Name}, {"uid", string(r.UID)},
	}
	version := chainVersion1
	if r.NamespaceUID != "" {
		version = chainVersion2
		record = slices.Insert(record, 1, member{"archivedAt", chainTime(r.ArchivedAt)})
		record = slices.Insert(record, slices.IndexFunc(record, func(m member) bool { return m.name == "namespace" })+1,
			member{"namespaceUID", string(r.NamespaceUID)})
	}
	sum := sha256.New()
	w := bufio.NewWriter(sum)
	_, _ = w.WriteString(`{"chain":` + strconv.Itoa(version) + `,"previous":`)
	digest.WriteString(w, previous)
	_, _ = w.WriteString(`,"record":{`)
	for i, m := range record {
		if i > 0 {
			_ = w.WriteByte(',')
		}
		digest.WriteString(w, m.name)
		_ = w.WriteByte(':')
		switch v := m.value.(type) {
		case string:
			digest.WriteString(w, v)
		case int64:
			_, _ = w.WriteString(strconv.FormatInt(v, 10))
		case bool:
			_, _ = w.WriteString(strconv.FormatBool(v))
		}
	}
	_, _ = w.WriteString(`},"sequence":` + strconv.FormatInt(sequence, 10) + `}`)
	if err := w.Flush(); err != nil {
		return "", fmt.Errorf("cannot hash the chain's document of %s/%s: %w", r.Namespace, r.Key, err)
	}
	return hex.EncodeToString(sum.Sum(nil)), nil
}

// Verification is what Verify found in one namespace's chain.
type Verification struct {
	Namespace string `json:"namespace"`
	// Head is the newest link: the one to copy, and to compare later.
	Head Link `json:"head"`
	// Records counts the chained records checked, Pruned those that
	// pruning removed, whose links the chain keeps.
	Records int64 `json:"records"`
	Pruned  int64 `json:"pruned"`
	// Unchained counts the records archived before the archive had chains:
	// nothing proves them unaltered.
	Unchained int64 `json:"unchained"`
	// Broken is the first place where the chain does not hold; nil when it
	// holds throughout.
	Broken *Break `json:"broken,omitempty"`
	// Copied is what became of a head copied earlier, when one was given
	// and the chain holds up to it.
	Copied *CopiedHead `json:"copied,omitempty"`
}

// CopiedHead is a head copied earlier, checked against the chain.
type CopiedHead struct {
	Link
	// Result is CopiedMatches, or CopiedPruned when its record was pruned
	// inside a run, whose last hash alone the chain keeps.
	Result string `json:"result"`
}

// The results of checking a copied head that the chain does not break.
const (
	CopiedMatches = "Matches"
	CopiedPruned  = "Pruned"
)

// Break names the first record at which a chain does not hold.
type Break struct {
	// Sequence is the record's place in the chain; Key and UID name it
	// when it is still there.
	Sequence int64  `json:"sequence"`
	Key      string `json:"key,omitempty"`
	UID      string `json:"uid,omitempty"`
	// Problem says what does not hold, in a sentence.
	Problem string `json:"problem"`
}

// verifyPage bounds the records one query of Verify reads.
const verifyPage = 500

// Verify recomputes the chain of namespace from its first record and
// returns where it first breaks, if it does: a record whose columns no
// longer hash to its link (changed), a sequence number with neither a
// record nor a pruned link (deleted), or a record that does not follow the
// hash before it (reordered or rechained). A chain that holds was not
// altered after its records were archived, up to its head; the newest
// records' deletion shows against the head kept apart from them, and their
// deletion with that head's rewriting only against a head copied before.
//
// copied, when set, is a head copied earlier: the chain must hold the same
// hash at its sequence, else it was rewritten up to there.
func (s *Store) Verify(ctx context.Context, namespace string, copied *Link) (*Verification, error) {
	v, err := s.verify(ctx, namespace, copied)
	observe("verify", err)
	if err != nil {
		return nil, fmt.Errorf("%w: cannot verify the chain of namespace %s: %w", ErrUnavailable, namespace, err)
	}
	return v, nil
}

func (s *Store) verify(ctx context.Context, namespace string, copied *Link) (*Verification, error) {
	var v *Verification
	// One snapshot: an append or a prune commits its records with their
	// head or links, so that a chain being written verifies as it stood.
	err := pgx.BeginTxFunc(ctx, s.reads, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var err error
		v, err = verifyIn(ctx, tx, namespace, copied)
		return err
	})
	return v, err
}

func verifyIn(ctx context.Context, tx pgx.Tx, namespace string, copied *Link) (*Verification, error) {
	v := &Verification{Namespace: namespace}
	// compare checks the copied head against the link at its sequence.
	compare := func(at Link) *Break {
		if copied == nil || at.Sequence != copied.Sequence {
			return nil
		}
		if at.Hash != copied.Hash {
			return &Break{Sequence: at.Sequence, Problem: "its hash is not the copied head's: the chain was rewritten up to here"}
		}
		v.Copied = &CopiedHead{Link: *copied, Result: CopiedMatches}
		return nil
	}
	recorded, started, err := recordedHead(ctx, tx, namespace)
	if err != nil {
		return nil, err
	}
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM toolledger_records
WHERE namespace = $1 AND chain_seq IS NULL AND ($2::timestamptz IS NULL OR archived_at < $2)`, namespace, started).Scan(&v.Unchained); err != nil {
		return nil, err
	}
	runs, err := prunedRuns(ctx, tx, namespace)
	if err != nil {
		return nil, err
	}
	// throughPruned moves the head over the pruned runs before sequence
	// upTo, each of which must follow it.
	throughPruned := func(upTo int64) *Break {
		for len(runs) > 0 && runs[0].first < upTo {
			run := runs[0]
			switch want := v.Head.Sequence + 1; {
			case run.first < want:
				return &Break{Sequence: run.first, Problem: fmt.Sprintf("the pruned records %d to %d overlap records still in the chain", run.first, run.last)}
			case run.first > want:
				return &Break{Sequence: want, Problem: missing(want, run.first-1)}
			case run.firstPrev != v.Head.Hash:
				return &Break{Sequence: run.first, Problem: fmt.Sprintf("the pruned records %d to %d do not follow the hash of record %d", run.first, run.last, v.Head.Sequence)}
			}
			v.Head, v.Pruned, runs = Link{Sequence: run.last, Hash: run.lastHash}, v.Pruned+run.last-run.first+1, runs[1:]
			if copied != nil && copied.Sequence >= run.first && copied.Sequence < run.last {
				v.Copied = &CopiedHead{Link: *copied, Result: CopiedPruned}
			}
			if b := compare(v.Head); b != nil {
				return b
			}
		}
		return nil
	}
	// A page's records are checked one at a time as they arrive: a record
	// may be as large as etcd let an action be.
	for after, more := int64(0), true; more; {
		rows, err := tx.Query(ctx, `
SELECT chain_prev, action::text, `+chainedColumns+`
FROM toolledger_records
WHERE namespace = $1 AND chain_seq > $2
ORDER BY chain_seq
LIMIT $3`, namespace, after, verifyPage)
		if err != nil {
			return nil, err
		}
		read := 0
		err = forEachChained(rows, func(c *chained) bool {
			read, after = read+1, c.record.Chain.Sequence
			if v.Broken = throughPruned(c.record.Chain.Sequence); v.Broken != nil {
				return false
			}
			if v.Broken = v.check(c); v.Broken != nil {
				return false
			}
			v.Head, v.Records = c.record.Chain, v.Records+1
			v.Broken = compare(v.Head)
			return v.Broken == nil
		})
		switch {
		case err != nil:
			return nil, err
		case v.Broken != nil:
			return v, nil
		}
		more = read == verifyPage
	}
	if v.Broken = throughPruned(math.MaxInt64); v.Broken != nil {
		return v, nil
	}
	switch {
	case v.Head.Sequence < recorded.Sequence:
		v.Broken = &Break{Sequence: v.Head.Sequence + 1, Problem: missing(v.Head.Sequence+1, recorded.Sequence)}
	case v.Head.Sequence > recorded.Sequence:
		v.Broken = &Break{Sequence: recorded.Sequence + 1, Problem: fmt.Sprintf("the chain goes on past its recorded head, record %d: records were added outside the ledger", recorded.Sequence)}
	case v.Head.Hash != recorded.Hash:
		v.Broken = &Break{Sequence: v.Head.Sequence, Problem: "the newest record's hash is not the recorded head's: the chain was rewritten"}
	}
	if v.Broken == nil && copied != nil && copied.Sequence > v.Head.Sequence {
		v.Broken = &Break{Sequence: copied.Sequence, Problem: fmt.Sprintf("the copied head is past the chain's head, record %d: records after it were deleted, and the head with them", v.Head.Sequence)}
	}
	if v.Broken != nil || started == nil {
		return v, nil
	}
	// A row archived since the chain started, outside it.
	var key, uid string
	err = tx.QueryRow(ctx, `SELECT key, uid FROM toolledger_records
WHERE namespace = $1 AND chain_seq IS NULL AND archived_at >= $2 ORDER BY archived_at, uid LIMIT 1`, namespace, started).Scan(&key, &uid)
	switch {
	case err == nil:
		v.Broken = &Break{Key: key, UID: uid, Problem: "it was archived after the chain started, outside it: inserted by hand, or by a manager older than the chain"}
	case !errors.Is(err, pgx.ErrNoRows):
		return nil, err
	}
	return v, nil
}

// recordedHead is the namespace's head as toolledger_chain_heads keeps it,
// and when its chain started; nil when it has none.
func recordedHead(ctx context.Context, tx pgx.Tx, namespace string) (Link, *time.Time, error) {
	var head Link
	var started time.Time
	err := tx.QueryRow(ctx, `SELECT seq, hash, started_at FROM toolledger_chain_heads WHERE namespace = $1`, namespace).Scan(&head.Sequence, &head.Hash, &started)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return Link{}, nil, nil
	case err != nil:
		return Link{}, nil, err
	}
	return head, &started, nil
}

// check checks the chained record c, the next after the head.
func (v *Verification) check(c *chained) *Break {
	at := &Break{Sequence: c.record.Chain.Sequence, Key: c.record.Key, UID: string(c.record.UID)}
	switch want := v.Head.Sequence + 1; {
	case c.record.Chain.Sequence > want:
		return &Break{Sequence: want, Problem: missing(want, c.record.Chain.Sequence-1)}
	case c.record.Chain.Sequence < want:
		at.Problem = fmt.Sprintf("it repeats sequence number %d, already taken by a pruned record", c.record.Chain.Sequence)
		return at
	case c.previous != v.Head.Hash:
		at.Problem = fmt.Sprintf("it does not follow the hash of record %d: the chain was rewritten from here", v.Head.Sequence)
		return at
	}
	hash, err := linkHash(c.record.Chain.Sequence, c.previous, &c.record, c.actionText)
	switch {
	case err != nil:
		at.Problem = err.Error()
		return at
	case hash != c.record.Chain.Hash:
		at.Problem = "its columns no longer hash to its link: it was changed after it was archived"
		return at
	}
	return nil
}

func missing(from, to int64) string {
	if from == to {
		return fmt.Sprintf("record %d is missing: deleted, not pruned", from)
	}
	return fmt.Sprintf("records %d to %d are missing: deleted, not pruned", from, to)
}

// chained is a record read with the hash before it and the text of its
// action as the database keeps it.
type chained struct {
	previous   string
	actionText string
	record     Record
}

// chainedColumns are recordColumns without the action, which a chained
// record carries as its text.
var chainedColumns = strings.Replace(recordColumns, "action,", "NULL::jsonb,", 1)

// forEachChained hands each of rows to each, one at a time, until it
// returns false.
func forEachChained(rows pgx.Rows, each func(*chained) bool) error {
	defer rows.Close()
	for rows.Next() {
		var c chained
		raw := recordScan{record: &c.record}
		err := rows.Scan(append([]any{&c.previous, &c.actionText}, raw.dest()...)...)
		raw.finish()
		if err != nil {
			return err
		}
		if !each(&c) {
			break
		}
	}
	return rows.Err()
}

// prunedRun is a run of consecutive records that pruning removed: the
// hash the first followed and the last one's.
type prunedRun struct {
	first, last         int64
	firstPrev, lastHash string
}

func prunedRuns(ctx context.Context, tx pgx.Tx, namespace string) ([]prunedRun, error) {
	rows, err := tx.Query(ctx, `SELECT first_seq, last_seq, first_prev, last_hash FROM toolledger_chain_pruned
WHERE namespace = $1 ORDER BY first_seq`, namespace)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (prunedRun, error) {
		var r prunedRun
		return r, row.Scan(&r.first, &r.last, &r.firstPrev, &r.lastHash)
	})
}

// Namespaces lists the namespaces that have a chain or archived records,
// in order.
func (s *Store) Namespaces(ctx context.Context) ([]string, error) {
	rows, err := s.reads.Query(ctx, `SELECT namespace FROM toolledger_chain_heads UNION SELECT namespace FROM toolledger_records ORDER BY 1`)
	var namespaces []string
	if err == nil {
		namespaces, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	observe("list", err)
	if err != nil {
		return nil, fmt.Errorf("%w: cannot list the archive's namespaces: %w", ErrUnavailable, err)
	}
	return namespaces, nil
}
