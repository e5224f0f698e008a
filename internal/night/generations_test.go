package night

import (
	"slices"
	"testing"

	"github.com/cairnhq/cairn/internal/books"
)

func entry(key string, amount int64) books.Entry {
	return books.Entry{Key: key, RunID: "r", InvoiceNo: "INV", Line: 1, Kind: "qty", SupplierID: "SUP-1", AmountPaise: amount, CreatedAt: "t"}
}

func keysOf(es []books.Entry) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.Key
	}
	return out
}

func TestPlanRows(t *testing.T) {
	desired := []books.Entry{entry("r:a", 100), entry("r:b", 250), entry("r:c", 300)}
	existing := []books.Entry{
		entry("r:a", 100), // unchanged: left alone
		entry("r:b", 200), // changed: reversed, and written again under :g1
		entry("r:d", 50),  // no longer wanted: reversed
		// r:c was never written (the first generation stopped before it)
	}
	p := planRows(1, desired, existing, ledgerOps)
	if got := keysOf(p.reverse); !slices.Equal(got, []string{"r:b:rev", "r:d:rev"}) {
		t.Errorf("reversals %v", got)
	}
	if p.reverse[0].AmountPaise != -200 || p.reverse[0].Reverses != "r:b" {
		t.Errorf("reversal %+v", p.reverse[0])
	}
	if got := keysOf(p.write); !slices.Equal(got, []string{"r:b:g1", "r:c:g1"}) {
		t.Errorf("writes %v", got)
	}
	if got := keysOf(p.stand); !slices.Equal(got, []string{"r:a", "r:b:g1", "r:c:g1"}) {
		t.Errorf("standing %v", got)
	}

	// The same generation again, after it wrote everything: nothing to do.
	after := append(slices.Clone(existing), append(p.reverse, p.write...)...)
	again := planRows(1, desired, after, ledgerOps)
	if len(again.reverse) != 0 || len(again.write) != 0 || !slices.Equal(keysOf(again.stand), keysOf(p.stand)) {
		t.Errorf("repeat of generation 1: reverse %v, write %v, stand %v", keysOf(again.reverse), keysOf(again.write), keysOf(again.stand))
	}

	// Generation 2 with b back at 200: b:g1 reversed, b:g2 written; a reversal is never reversed.
	desired[1] = entry("r:b", 200)
	p2 := planRows(2, desired, after, ledgerOps)
	if got := keysOf(p2.reverse); !slices.Equal(got, []string{"r:b:g1:rev"}) {
		t.Errorf("generation 2 reversals %v", got)
	}
	if got := keysOf(p2.write); !slices.Equal(got, []string{"r:b:g2"}) {
		t.Errorf("generation 2 writes %v", got)
	}

	// Generation 0 writes what it is given.
	if p0 := planRows(0, desired, existing, ledgerOps); len(p0.reverse) != 0 || !slices.Equal(keysOf(p0.write), keysOf(desired)) {
		t.Errorf("generation 0: %+v", p0)
	}
}
