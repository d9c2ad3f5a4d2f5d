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
	// Head is the newest link the verification reached: the chain's head
	// once Complete, the one to copy and compare later.
	Head Link `json:"head"`
	// Complete is whether the verification reached the chain's head; an
	// incomplete one stopped at its budget, and goes on from Head.
	Complete bool `json:"complete"`
	// Length is the sequence of the chain's head, as kept apart from the
	// records: how far a complete verification goes.
	Length int64 `json:"length"`
	// Records counts the chained records up to Head, Pruned those of them
	// that pruning removed, whose links the chain keeps; Checked those this
	// verification read and hashed again.
	Records int64 `json:"records"`
	Pruned  int64 `json:"pruned"`
	Checked int64 `json:"checked"`
	// Unchained counts the records archived before the archive had chains:
	// nothing proves them unaltered.
	Unchained int64 `json:"unchained"`
	// Anchors counts the links kept outside the database (the cluster's
	// checkpoints) that the chain was found to hold.
	Anchors int `json:"anchors"`
	// Broken is the first place where the chain does not hold; nil when it
	// holds as far as the verification went.
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

// Anchor is a link kept outside the database, by the cluster: the chain
// must hold its hash at its sequence, or it was rewritten up to there.
type Anchor struct {
	Link
	// Taken is when it was taken from the chain.
	Taken time.Time
}

// VerifyFrom says where a verification starts, how long it may read, and
// what it checks besides the chain itself.
type VerifyFrom struct {
	// After is a link an earlier verification reached, which the cluster
	// keeps: this one goes on after it, trusting what came before, and
	// checks only that the chain still holds the anchors there. The zero
	// Link starts at the first record.
	After Link
	// Anchors are the cluster's checkpoints of the chain.
	Anchors []Anchor
	// Copied is a head copied earlier, which the chain must still hold.
	Copied *Link
	// Budget bounds the time spent reading records; the verification
	// stops, incomplete, when it passes. Zero reads to the head.
	Budget time.Duration
}

// verifyPage bounds the records one query of Verify reads.
const verifyPage = 500

// Verify recomputes the chain of namespace from its first record, or from
// a link an earlier verification reached, and returns where it first
// breaks, if it does: a record whose columns no longer hash to its link
// (changed), a sequence number with neither a record nor a pruned link
// (deleted), a record that does not follow the hash before it (reordered
// or rechained), or a link that is not the one the cluster or an auditor
// kept (rewritten up to there). A chain that holds was not altered after
// its records were archived, up to its head; the newest records' deletion
// shows against the head kept apart from them, and their deletion with
// that head's rewriting only against a head kept outside the database.
func (s *Store) Verify(ctx context.Context, namespace string, from VerifyFrom) (*Verification, error) {
	var v *Verification
	// One snapshot: an append or a prune commits its records with their
	// head or links, so that a chain being written verifies as it stood.
	err := pgx.BeginTxFunc(ctx, s.reads, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		vr := &verifier{tx: tx, from: from, v: &Verification{Namespace: namespace}}
		if from.Budget > 0 {
			vr.deadline = time.Now().Add(from.Budget)
		}
		var err error
		if v, err = vr.run(ctx); v != nil {
			v.Records = v.Head.Sequence - v.Pruned
		}
		return err
	})
	observe("verify", err)
	if err != nil {
		return nil, fmt.Errorf("%w: cannot verify the chain of namespace %s: %w", ErrUnavailable, namespace, err)
	}
	return v, nil
}

// verifier is one verification, in one snapshot.
type verifier struct {
	tx       pgx.Tx
	from     VerifyFrom
	deadline time.Time
	v        *Verification
	// runs are the pruned runs not yet gone through.
	runs []prunedRun
}

func (vr *verifier) run(ctx context.Context) (*Verification, error) {
	v, ns := vr.v, vr.v.Namespace
	recorded, started, err := recordedHead(ctx, vr.tx, ns)
	if err != nil {
		return nil, err
	}
	v.Length = recorded.Sequence
	if err := vr.tx.QueryRow(ctx, `SELECT count(*) FROM toolledger_records
WHERE namespace = $1 AND chain_seq IS NULL AND ($2::timestamptz IS NULL OR archived_at < $2)`, ns, started).Scan(&v.Unchained); err != nil {
		return nil, err
	}
	if vr.runs, err = prunedRuns(ctx, vr.tx, ns); err != nil {
		return nil, err
	}
	if v.Broken, err = vr.start(ctx); v.Broken != nil || err != nil {
		return v, err
	}
	// A page's records are checked one at a time as they arrive: a record
	// may be as large as etcd let an action be.
	for more := true; more; {
		rows, err := vr.tx.Query(ctx, `
SELECT chain_prev, action::text, `+chainedColumns+`
FROM toolledger_records
WHERE namespace = $1 AND chain_seq > $2
ORDER BY chain_seq
LIMIT $3`, ns, v.Head.Sequence, verifyPage)
		if err != nil {
			return nil, err
		}
		read := 0
		err = forEachChained(rows, func(c *chained) bool {
			read++
			if v.Broken = vr.throughPruned(c.record.Chain.Sequence); v.Broken != nil {
				return false
			}
			if v.Broken = v.check(c); v.Broken != nil {
				return false
			}
			v.Head, v.Checked = c.record.Chain, v.Checked+1
			v.Broken = vr.compare(v.Head)
			return v.Broken == nil
		})
		switch {
		case err != nil:
			return nil, err
		case v.Broken != nil:
			return v, nil
		}
		more = read == verifyPage
		// A page at least, so that each step gets on.
		if more && !vr.deadline.IsZero() && time.Now().After(vr.deadline) {
			return v, nil
		}
	}
	if v.Broken = vr.throughPruned(math.MaxInt64); v.Broken != nil {
		return v, nil
	}
	v.Complete = true
	v.Broken, err = vr.atHead(ctx, recorded, started)
	return v, err
}

// start sets the verification's head to where it starts, and checks what
// it does not read again before it: the link it starts from, the anchors
// and the copied head must still be the chain's.
func (vr *verifier) start(ctx context.Context) (*Break, error) {
	v, after := vr.v, vr.from.After
	for _, run := range vr.runs {
		if run.first <= after.Sequence {
			v.Pruned += min(run.last, after.Sequence) - run.first + 1
		}
	}
	for len(vr.runs) > 0 && vr.runs[0].last <= after.Sequence {
		vr.runs = vr.runs[1:]
	}
	v.Head = after
	if after.Sequence > 0 {
		switch hash, err := vr.keptHash(ctx, after.Sequence); {
		case err != nil:
			return nil, err
		case hash == nil:
			return &Break{Sequence: after.Sequence, Problem: missing(after.Sequence, after.Sequence)}, nil
		case *hash != "" && *hash != after.Hash:
			return &Break{Sequence: after.Sequence, Problem: "its hash is not the one the last verification reached: the chain was rewritten up to here"}, nil
		}
	}
	// A run pruned since covers where the earlier verification stopped:
	// it goes on from the run's end.
	if len(vr.runs) > 0 && vr.runs[0].first <= after.Sequence {
		run := vr.runs[0]
		v.Head, v.Pruned, vr.runs = Link{Sequence: run.last, Hash: run.lastHash}, v.Pruned+run.last-after.Sequence, vr.runs[1:]
	}
	for _, a := range vr.from.Anchors {
		if a.Sequence > v.Head.Sequence {
			continue
		}
		switch hash, err := vr.keptHash(ctx, a.Sequence); {
		case err != nil:
			return nil, err
		case hash == nil:
			return &Break{Sequence: a.Sequence, Problem: missing(a.Sequence, a.Sequence)}, nil
		case *hash == "":
			// Pruned inside a run since: not comparable.
		case *hash != a.Hash:
			return anchorBroken(a), nil
		default:
			v.Anchors++
		}
	}
	if c := vr.from.Copied; c != nil && c.Sequence <= v.Head.Sequence {
		switch hash, err := vr.keptHash(ctx, c.Sequence); {
		case err != nil:
			return nil, err
		case hash == nil:
			return &Break{Sequence: c.Sequence, Problem: missing(c.Sequence, c.Sequence)}, nil
		case *hash == "":
			v.Copied = &CopiedHead{Link: *c, Result: CopiedPruned}
		case *hash != c.Hash:
			return &Break{Sequence: c.Sequence, Problem: "its hash is not the copied head's: the chain was rewritten up to here"}, nil
		default:
			v.Copied = &CopiedHead{Link: *c, Result: CopiedMatches}
		}
	}
	return nil, nil
}

// keptHash is the hash the chain keeps at sequence: its record's, or the
// last hash of the pruned run it ends; "" inside a pruned run, whose other
// hashes are gone; nil when neither keeps it (deleted).
func (vr *verifier) keptHash(ctx context.Context, sequence int64) (*string, error) {
	var hash string
	err := vr.tx.QueryRow(ctx, `SELECT chain_hash FROM toolledger_records WHERE namespace = $1 AND chain_seq = $2
UNION ALL SELECT CASE WHEN last_seq = $2 THEN last_hash ELSE '' END FROM toolledger_chain_pruned
WHERE namespace = $1 AND first_seq <= $2 AND last_seq >= $2
LIMIT 1`, vr.v.Namespace, sequence).Scan(&hash)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, nil
	case err != nil:
		return nil, err
	}
	return &hash, nil
}

func anchorBroken(a Anchor) *Break {
	return &Break{Sequence: a.Sequence, Problem: fmt.Sprintf("its hash is not the one the cluster's checkpoint of %s kept: the chain was rewritten up to here",
		a.Taken.UTC().Format(time.RFC3339))}
}

// compare checks the anchors and the copied head at the link the
// verification reached.
func (vr *verifier) compare(at Link) *Break {
	for _, a := range vr.from.Anchors {
		if a.Sequence != at.Sequence {
			continue
		}
		if a.Hash != at.Hash {
			return anchorBroken(a)
		}
		vr.v.Anchors++
	}
	if c := vr.from.Copied; c != nil && c.Sequence == at.Sequence {
		if c.Hash != at.Hash {
			return &Break{Sequence: at.Sequence, Problem: "its hash is not the copied head's: the chain was rewritten up to here"}
		}
		vr.v.Copied = &CopiedHead{Link: *c, Result: CopiedMatches}
	}
	return nil
}

// throughPruned moves the head over the pruned runs before sequence upTo,
// each of which must follow it.
func (vr *verifier) throughPruned(upTo int64) *Break {
	v := vr.v
	for len(vr.runs) > 0 && vr.runs[0].first < upTo {
		run := vr.runs[0]
		switch want := v.Head.Sequence + 1; {
		case run.first < want:
			return &Break{Sequence: run.first, Problem: fmt.Sprintf("the pruned records %d to %d overlap records still in the chain", run.first, run.last)}
		case run.first > want:
			return &Break{Sequence: want, Problem: missing(want, run.first-1)}
		case run.firstPrev != v.Head.Hash:
			return &Break{Sequence: run.first, Problem: fmt.Sprintf("the pruned records %d to %d do not follow the hash of record %d", run.first, run.last, v.Head.Sequence)}
		}
		v.Head, v.Pruned, vr.runs = Link{Sequence: run.last, Hash: run.lastHash}, v.Pruned+run.last-run.first+1, vr.runs[1:]
		if c := vr.from.Copied; c != nil && c.Sequence >= run.first && c.Sequence < run.last {
			v.Copied = &CopiedHead{Link: *c, Result: CopiedPruned}
		}
		if b := vr.compare(v.Head); b != nil {
			return b
		}
	}
	return nil
}

// atHead checks a verification that reached the chain's end: against the
// head kept apart from the records, the links kept outside the database,
// and the rows inserted outside the chain since it started.
func (vr *verifier) atHead(ctx context.Context, recorded Link, started *time.Time) (*Break, error) {
	v := vr.v
	switch {
	case v.Head.Sequence < recorded.Sequence:
		return &Break{Sequence: v.Head.Sequence + 1, Problem: missing(v.Head.Sequence+1, recorded.Sequence)}, nil
	case v.Head.Sequence > recorded.Sequence:
		return &Break{Sequence: recorded.Sequence + 1, Problem: fmt.Sprintf("the chain goes on past its recorded head, record %d: records were added outside the ledger", recorded.Sequence)}, nil
	case v.Head.Hash != recorded.Hash:
		return &Break{Sequence: v.Head.Sequence, Problem: "the newest record's hash is not the recorded head's: the chain was rewritten"}, nil
	}
	for _, a := range vr.from.Anchors {
		if a.Sequence > v.Head.Sequence {
			return &Break{Sequence: a.Sequence, Problem: fmt.Sprintf("the cluster's checkpoint of %s is past the chain's head, record %d: records after it were deleted, and the head with them",
				a.Taken.UTC().Format(time.RFC3339), v.Head.Sequence)}, nil
		}
	}
	if c := vr.from.Copied; c != nil && c.Sequence > v.Head.Sequence {
		return &Break{Sequence: c.Sequence, Problem: fmt.Sprintf("the copied head is past the chain's head, record %d: records after it were deleted, and the head with them", v.Head.Sequence)}, nil
	}
	if started == nil {
		return nil, nil
	}
	// A row archived since the chain started, outside it.
	var key, uid string
	err := vr.tx.QueryRow(ctx, `SELECT key, uid FROM toolledger_records
WHERE namespace = $1 AND chain_seq IS NULL AND archived_at >= $2 ORDER BY archived_at, uid LIMIT 1`, v.Namespace, *started).Scan(&key, &uid)
	switch {
	case err == nil:
		return &Break{Key: key, UID: uid, Problem: "it was archived after the chain started, outside it: inserted by hand, or by a manager older than the chain"}, nil
	case !errors.Is(err, pgx.ErrNoRows):
		return nil, err
	}
	return nil, nil
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
	rows, err := s.reads.Query(ctx, `SELECT namespace FROM toolledger_chain_heads UNION SELECT namespace FROM toolledger_namespaces ORDER BY 1`)
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

// Heads are the namespaces' chains' heads, by namespace, as kept apart
// from the records.
func (s *Store) Heads(ctx context.Context) (map[string]Link, error) {
	rows, err := s.reads.Query(ctx, `SELECT namespace, seq, hash FROM toolledger_chain_heads`)
	heads := map[string]Link{}
	if err == nil {
		for rows.Next() {
			var (
				namespace string
				head      Link
			)
			if err = rows.Scan(&namespace, &head.Sequence, &head.Hash); err != nil {
				break
			}
			heads[namespace] = head
		}
		rows.Close()
		if err == nil {
			err = rows.Err()
		}
	}
	observe("read", err)
	if err != nil {
		return nil, fmt.Errorf("%w: cannot read the chains' heads: %w", ErrUnavailable, err)
	}
	return heads, nil
}
