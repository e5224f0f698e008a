// Package records is the domain of the enrich example job: the records it fetches, the
// three enrichments it adds to each, the validation and transform it applies, and the
// clients of the three enrichment APIs. It is pure Go with no Cairn dependency, so that
// the durable job and the plain one share it word for word.
package records

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
)

// Record is one item the job fetches: a customer and an amount owed, in paise.
type Record struct {
	ID          string `json:"id"`
	Name        string `json:"name"`
	Email       string `json:"email"`
	Country     string `json:"country"`
	AmountPaise int64  `json:"amount_paise"`
}

// Countries are the ISO 3166-1 alpha-2 codes Validate accepts.
var Countries = map[string]bool{
	"IN": true, "US": true, "GB": true, "DE": true, "FR": true,
	"JP": true, "BR": true, "SG": true, "AU": true, "CA": true,
}

// countryList is Countries in a fixed order, so that Generate is deterministic.
var countryList = []string{"IN", "US", "GB", "DE", "FR", "JP", "BR", "SG", "AU", "CA"}

var (
	firstNames = []string{"asha", "ravi", "meera", "john", "li", "fatima", "carlos", "yuki", "anna", "omar"}
	lastNames  = []string{"iyer", "shah", "smith", "chen", "khan", "silva", "tanaka", "müller", "dubois", "brown"}
)

// InvalidEvery is the period of the invalid records Generate writes: records
// InvalidEvery, 2*InvalidEvery, ... fail Validate, alternately by a bad email and an
// unknown country.
const InvalidEvery = 20

// UnknownCountry is the country code of Generate's invalid records that are not a bad
// email.
const UnknownCountry = "ZZ"

// FormatID is the id of the i-th record (from 1): "rec-" and i zero-padded to width
// digits.
func FormatID(i, width int) string { return fmt.Sprintf("rec-%0*d", width, i) }

// idWidth is how many digits the ids of n records take: 4, or more when n > 9999.
func idWidth(n int) int { return max(4, len(fmt.Sprint(n))) }

// Generate writes n deterministic records (the same for the same n and seed) as JSON
// lines to path and returns them. Every InvalidEvery-th record is invalid: the first,
// third... such have an email without '@', the others an unknown country.
func Generate(path string, n int, seed int64) ([]Record, error) {
	if n < 0 {
		return nil, fmt.Errorf("generating records: count %d is negative", n)
	}
	rng := rand.New(rand.NewPCG(uint64(seed), 0x656e72696368)) // "enrich"
	width := idWidth(n)
	recs := make([]Record, 0, n)
	for i := 1; i <= n; i++ {
		first, last := firstNames[rng.IntN(len(firstNames))], lastNames[rng.IntN(len(lastNames))]
		r := Record{
			ID:          FormatID(i, width),
			Name:        "  " + first + " " + last + " ",
			Email:       fmt.Sprintf("%s.%s%d@Example.COM", strings.ToUpper(first[:1])+first[1:], last, i),
			Country:     countryList[rng.IntN(len(countryList))],
			AmountPaise: 100 + rng.Int64N(10_000_00),
		}
		if i%InvalidEvery == 0 {
			if (i/InvalidEvery)%2 == 1 {
				r.Email = strings.ReplaceAll(r.Email, "@", "-at-")
			} else {
				r.Country = UnknownCountry
			}
		}
		recs = append(recs, r)
	}
	if err := write(path, recs); err != nil {
		return nil, err
	}
	return recs, nil
}

// write writes recs as JSON lines to path.
func write(path string, recs []Record) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("writing records: %w", err)
	}
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	for _, r := range recs {
		if err := enc.Encode(r); err != nil {
			f.Close()
			return fmt.Errorf("writing record %s to %s: %w", r.ID, path, err)
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return fmt.Errorf("writing records to %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("writing records to %s: %w", path, err)
	}
	return nil
}

// Read reads the JSON-lines records at path. A malformed line, or one without an id,
// is an error naming its line number; blank lines are skipped.
func Read(path string) ([]Record, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading records: %w", err)
	}
	defer f.Close()
	var recs []Record
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for line := 1; sc.Scan(); line++ {
		b := sc.Bytes()
		if len(strings.TrimSpace(string(b))) == 0 {
			continue
		}
		var r Record
		dec := json.NewDecoder(strings.NewReader(string(b)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&r); err != nil {
			return nil, fmt.Errorf("reading records: %s line %d: %w", path, line, err)
		}
		if r.ID == "" {
			return nil, fmt.Errorf("reading records: %s line %d: %w", path, line, errors.New("no id"))
		}
		recs = append(recs, r)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading records from %s: %w", path, err)
	}
	return recs, nil
}
