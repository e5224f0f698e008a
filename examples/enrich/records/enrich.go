package records

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
)

// Profile is the profile API's enrichment: the customer's segment.
type Profile struct {
	Segment string `json:"segment"`
}

// Geo is the geo API's enrichment: where the customer is served from.
type Geo struct {
	Region   string `json:"region"`
	Timezone string `json:"timezone"`
}

// Risk is the risk API's enrichment: a score from 0 (safe) to 100.
type Risk struct {
	Score int `json:"score"`
}

// Enriched is a record with its three enrichments.
type Enriched struct {
	Record  Record  `json:"record"`
	Profile Profile `json:"profile"`
	Geo     Geo     `json:"geo"`
	Risk    Risk    `json:"risk"`
}

// ErrInvalid marks every error Validate returns.
var ErrInvalid = errors.New("invalid record")

// Validate says why e cannot be uploaded, naming the record, the field and its value:
// an email without exactly one '@' with text on both sides, a country not in
// Countries, a risk score outside 0..100, or an amount that is not positive. Nil when
// e is valid. Errors match ErrInvalid.
func Validate(e Enriched) error {
	r := e.Record
	bad := func(field string, value any, why string) error {
		return fmt.Errorf("record %s: %s %q %s: %w", r.ID, field, fmt.Sprint(value), why, ErrInvalid)
	}
	local, domain, ok := strings.Cut(r.Email, "@")
	switch {
	case !ok:
		return bad("email", r.Email, "has no '@'")
	case local == "" || domain == "" || strings.Contains(domain, "@"):
		return bad("email", r.Email, "is not local@domain")
	case !Countries[r.Country]:
		return bad("country", r.Country, "is not a known country code")
	case e.Risk.Score < 0 || e.Risk.Score > 100:
		return bad("risk score", e.Risk.Score, "is outside 0..100")
	case r.AmountPaise <= 0:
		return bad("amount_paise", r.AmountPaise, "is not positive")
	}
	return nil
}

// Upload is what the job sends to the upload system for one valid record.
type Upload struct {
	ID          string `json:"id"`
	Name        string `json:"name"`
	Email       string `json:"email"`
	Region      string `json:"region"`
	Segment     string `json:"segment"`
	RiskBand    string `json:"risk_band"`
	AmountPaise int64  `json:"amount_paise"`
}

// The risk bands of Transform.
const (
	BandLow    = "low"    // score < 34
	BandMedium = "medium" // 34 <= score < 67
	BandHigh   = "high"   // 67 <= score
)

// RiskBand is the band of a risk score: low below 34, medium below 67, high above.
func RiskBand(score int) string {
	switch {
	case score < 34:
		return BandLow
	case score < 67:
		return BandMedium
	}
	return BandHigh
}

// Transform is the upload of a valid enriched record: the name trimmed, its inner
// spaces collapsed and each word title-cased, the email lower-cased, the risk score
// turned into its band.
func Transform(e Enriched) Upload {
	return Upload{
		ID:          e.Record.ID,
		Name:        titleCase(e.Record.Name),
		Email:       strings.ToLower(strings.TrimSpace(e.Record.Email)),
		Region:      e.Geo.Region,
		Segment:     e.Profile.Segment,
		RiskBand:    RiskBand(e.Risk.Score),
		AmountPaise: e.Record.AmountPaise,
	}
}

// titleCase trims s, collapses its spaces and upper-cases the first letter of each
// word, lower-casing the rest.
func titleCase(s string) string {
	words := strings.Fields(s)
	for i, w := range words {
		rs := []rune(strings.ToLower(w))
		rs[0] = unicode.ToUpper(rs[0])
		words[i] = string(rs)
	}
	return strings.Join(words, " ")
}
