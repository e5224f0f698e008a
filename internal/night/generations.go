package night

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/cairnhq/cairn/internal/books"
)

// A rerun (cairn rerun --from, cairn resume --after-fix) raises the run's generation. A writing
// step of generation g ≥ 1 does not trust that its earlier generations wrote what it would
// write now (DESIGN.md, "Reruns and corrections"): it reverses every standing row of its step
// that it will not write again with the same payload (key "<row key>:rev"), then writes its
// new rows under "<key>:g<g>". A standing row with the same payload is left alone. A repeat
// of the same generation finds its own rows standing and writes nothing twice.

// genSuffix is the ":g<h>" a key of generation h ≥ 1 ends with.
var genSuffix = regexp.MustCompile(`:g[0-9]+$`)

// baseKey is a row's key without its generation.
func baseKey(key string) string { return genSuffix.ReplaceAllString(key, "") }

// genKey is the key a row of generation g is written under.
func genKey(key string, g int) string {
	if g == 0 {
		return key
	}
	return fmt.Sprintf("%s:g%d", key, g)
}

// rowPlan is what a writing step of generation g does to one table.
type rowPlan[T any] struct {
	reverse []T // reversals of standing rows, written first, in key order
	write   []T // new rows, in key order
	stand   []T // the rows that stand for the desired ones afterwards (kept and new)
}

// rowOps are the table-specific parts of planning.
type rowOps[T any] struct {
	key      func(T) string
	reverses func(T) string
	withKey  func(T, string) T
	same     func(a, b T) bool // same payload, keys and times aside
	reversal func(T) T         // the row that reverses it, keyed "<key>:rev"
}

// planRows plans generation g's writes of desired (keyed by their base keys) over the run's
// existing rows. Generation 0 writes desired as they are: the outside system's key check
// makes a repeat a no-op and a different payload an error.
func planRows[T any](g int, desired, existing []T, ops rowOps[T]) rowPlan[T] {
	if g == 0 {
		return rowPlan[T]{write: desired, stand: desired}
	}
	reversed := map[string]bool{}
	for _, r := range existing {
		if k := ops.reverses(r); k != "" {
			reversed[k] = true
		}
	}
	var standing []T
	for _, r := range existing {
		if ops.reverses(r) == "" && !reversed[ops.key(r)] {
			standing = append(standing, r)
		}
	}
	byBase := map[string][]int{} // standing rows by base key: a big night has thousands
	for i, s := range standing {
		k := baseKey(ops.key(s))
		byBase[k] = append(byBase[k], i)
	}
	used := make([]bool, len(standing))
	var p rowPlan[T]
	for _, d := range desired {
		same := byBase[ops.key(d)]
		if at := slices.IndexFunc(same, func(i int) bool { return ops.same(standing[i], d) }); at >= 0 && !used[same[at]] {
			used[same[at]] = true
			p.stand = append(p.stand, standing[same[at]])
			continue
		}
		n := ops.withKey(d, genKey(ops.key(d), g))
		p.write = append(p.write, n)
		p.stand = append(p.stand, n)
	}
	for i, s := range standing {
		if !used[i] {
			p.reverse = append(p.reverse, ops.reversal(s))
		}
	}
	byKey := func(a, b T) int { return strings.Compare(ops.key(a), ops.key(b)) }
	slices.SortFunc(p.reverse, byKey)
	slices.SortFunc(p.write, byKey)
	return p
}

var ledgerOps = rowOps[books.Entry]{
	key:      func(e books.Entry) string { return e.Key },
	reverses: func(e books.Entry) string { return e.Reverses },
	withKey:  func(e books.Entry, k string) books.Entry { e.Key = k; return e },
	same: func(a, b books.Entry) bool {
		a.Key, a.CreatedAt, b.Key, b.CreatedAt = "", "", "", ""
		return a == b
	},
	reversal: func(e books.Entry) books.Entry {
		e.Reverses, e.Key, e.AmountPaise = e.Key, e.Key+":rev", -e.AmountPaise
		return e
	},
}

var stockOps = rowOps[books.Adjustment]{
	key:      func(a books.Adjustment) string { return a.Key },
	reverses: func(a books.Adjustment) string { return a.Reverses },
	withKey:  func(a books.Adjustment, k string) books.Adjustment { a.Key = k; return a },
	same: func(a, b books.Adjustment) bool {
		a.Key, a.CreatedAt, b.Key, b.CreatedAt = "", "", "", ""
		return a == b
	},
	reversal: func(a books.Adjustment) books.Adjustment {
		a.Reverses, a.Key = a.Key, a.Key+":rev"
		a.QtyDelta, a.ValueDeltaPaise = -a.QtyDelta, -a.ValueDeltaPaise
		a.Reason = "reversal of " + a.Reverses + " (rerun)"
		return a
	},
}
