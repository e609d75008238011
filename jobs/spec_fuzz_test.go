package jobs

import (
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/pollux-nomad/pollux/contract"
	"github.com/pollux-nomad/pollux/model"
)

// specKeys are the author-written meta keys ParseSpec reads, in the order
// of FuzzParseSpec's arguments.
var specKeys = []string{
	contract.MetaInitBatchSize, contract.MetaInitLR, contract.MetaMaxBatchSize, contract.MetaLocalBszMin, contract.MetaLocalBszMax,
	contract.MetaAccumulation, contract.MetaLRScaling, contract.MetaMinGPUs, contract.MetaMaxGPUs,
}

// maxSpecError bounds ParseSpec's message, however long the values.
const maxSpecError = 4 << 10

// checkSpecError asserts that every line of a ParseSpec error starts with
// a pollux_ key and that the whole message is short.
func checkSpecError(t *testing.T, err error) {
	t.Helper()
	msg := err.Error()
	if len(msg) >= maxSpecError {
		t.Errorf("error message is %d bytes, want < %d: %.200q...", len(msg), maxSpecError, msg)
	}
	for _, line := range strings.Split(msg, "\n") {
		if !strings.HasPrefix(line, "pollux_") {
			t.Errorf("error line %.200q does not start with a pollux_ key", line)
		}
	}
}

// checkSpec asserts the bounds of an accepted spec.
func checkSpec(t *testing.T, s Spec) {
	t.Helper()
	switch {
	case s.InitBatchSize < 1 || s.InitBatchSize > maxMetaValue:
		t.Errorf("InitBatchSize %d", s.InitBatchSize)
	case s.MaxBatchSize < s.InitBatchSize || s.MaxBatchSize > maxMetaValue:
		t.Errorf("MaxBatchSize %d with InitBatchSize %d", s.MaxBatchSize, s.InitBatchSize)
	case s.LocalBszMin < 1 || s.LocalBszMin > s.LocalBszMax || s.LocalBszMax > maxMetaValue:
		t.Errorf("local bounds [%d, %d]", s.LocalBszMin, s.LocalBszMax)
	case s.LocalBszMin > s.MaxBatchSize:
		t.Errorf("LocalBszMin %d above MaxBatchSize %d", s.LocalBszMin, s.MaxBatchSize)
	case !(s.InitLR > 0) || s.InitLR > maxInitLR:
		t.Errorf("InitLR %g", s.InitLR)
	case math.IsInf(s.InitLR*maxMetaValue, 0):
		t.Errorf("InitLR %g overflows when scaled", s.InitLR)
	case s.MinGPUs < 1 || s.MinGPUs > maxMetaValue:
		t.Errorf("MinGPUs %d", s.MinGPUs)
	case s.MaxGPUs != 0 && (s.MaxGPUs < s.MinGPUs || s.MaxGPUs > maxMetaValue):
		t.Errorf("MaxGPUs %d with MinGPUs %d", s.MaxGPUs, s.MinGPUs)
	case s.MinGPUs*s.LocalBszMin > s.MaxBatchSize:
		t.Errorf("%d GPUs x local %d exceed MaxBatchSize %d", s.MinGPUs, s.LocalBszMin, s.MaxBatchSize)
	}
	if _, err := model.ParseLRScaling(string(s.LRScaling)); err != nil || s.LRScaling == "" {
		t.Errorf("LRScaling %q", s.LRScaling)
	}
}

func TestParseSpecHostile(t *testing.T) {
	base := func(kv ...string) map[string]string {
		m := map[string]string{contract.MetaEnabled: "true", contract.MetaInitBatchSize: "128", contract.MetaInitLR: "0.1"}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	mib := strings.Repeat("7", 1<<20)
	tests := map[string]struct {
		meta map[string]string
		// wantErr are substrings of the error, in any order; none means the
		// meta is valid.
		wantErr []string
	}{
		"1e300 batch size":          {meta: base(contract.MetaInitBatchSize, "1e300"), wantErr: []string{contract.MetaInitBatchSize + `: not an integer: "1e300"`}},
		"20-digit batch size":       {meta: base(contract.MetaMaxBatchSize, "99999999999999999999"), wantErr: []string{contract.MetaMaxBatchSize + `: must be in [1, 16777216], got "99999999999999999999"`}},
		"int64 overflow by one":     {meta: base(contract.MetaMaxGPUs, "9223372036854775808"), wantErr: []string{contract.MetaMaxGPUs + `: must be in [1, 16777216], got "9223372036854775808"`}},
		"int64 max":                 {meta: base(contract.MetaMinGPUs, "9223372036854775807"), wantErr: []string{contract.MetaMinGPUs + ": must be in [1, 16777216], got 9223372036854775807"}},
		"just above the bound":      {meta: base(contract.MetaLocalBszMax, "16777217"), wantErr: []string{contract.MetaLocalBszMax + ": must be in [1, 16777216], got 16777217"}},
		"negative local min":        {meta: base(contract.MetaLocalBszMin, "-1"), wantErr: []string{contract.MetaLocalBszMin + ": must be in [1, 16777216], got -1"}},
		"zero batch size":           {meta: base(contract.MetaInitBatchSize, "0"), wantErr: []string{contract.MetaInitBatchSize + ": must be in [1, 16777216], got 0"}},
		"zero max gpus":             {meta: base(contract.MetaMaxGPUs, "0"), wantErr: []string{contract.MetaMaxGPUs + ": must be in [1, 16777216], got 0"}},
		"hex batch size":            {meta: base(contract.MetaInitBatchSize, "0x10"), wantErr: []string{contract.MetaInitBatchSize + `: not an integer: "0x10"`}},
		"digit separators":          {meta: base(contract.MetaInitBatchSize, "1_024"), wantErr: []string{contract.MetaInitBatchSize + `: not an integer: "1_024"`}},
		"fullwidth digits":          {meta: base(contract.MetaInitBatchSize, "１２８"), wantErr: []string{contract.MetaInitBatchSize + `: not an integer: "１２８"`}},
		"empty batch size":          {meta: base(contract.MetaInitBatchSize, ""), wantErr: []string{contract.MetaInitBatchSize + `: not an integer: ""`}},
		"blank batch size":          {meta: base(contract.MetaInitBatchSize, " \t "), wantErr: []string{contract.MetaInitBatchSize + `: not an integer: " \t "`}},
		"inner space":               {meta: base(contract.MetaInitBatchSize, "1 28"), wantErr: []string{contract.MetaInitBatchSize + `: not an integer: "1 28"`}},
		"zero lr":                   {meta: base(contract.MetaInitLR, "0"), wantErr: []string{contract.MetaInitLR + `: must be a positive finite number, got "0"`}},
		"negative lr":               {meta: base(contract.MetaInitLR, "-0.1"), wantErr: []string{contract.MetaInitLR + `: must be a positive finite number, got "-0.1"`}},
		"nan lr":                    {meta: base(contract.MetaInitLR, "nan"), wantErr: []string{contract.MetaInitLR + `: must be a positive finite number, got "nan"`}},
		"inf lr":                    {meta: base(contract.MetaInitLR, "+Inf"), wantErr: []string{contract.MetaInitLR + `: must be a positive finite number, got "+Inf"`}},
		"infinity lr":               {meta: base(contract.MetaInitLR, "infinity"), wantErr: []string{contract.MetaInitLR + `: must be a positive finite number, got "infinity"`}},
		"overflowing lr":            {meta: base(contract.MetaInitLR, "1e400"), wantErr: []string{contract.MetaInitLR + `: must be a positive finite number, got "1e400"`}},
		"1e300 lr":                  {meta: base(contract.MetaInitLR, "1e300"), wantErr: []string{contract.MetaInitLR + `: must be at most 1e+06, got "1e300"`}},
		"hex lr":                    {meta: base(contract.MetaInitLR, "0x10"), wantErr: []string{contract.MetaInitLR + `: must be a positive finite number, got "0x10"`}},
		"hex float lr":              {meta: base(contract.MetaInitLR, "0x1p-3"), wantErr: []string{contract.MetaInitLR + `: must be a positive finite number, got "0x1p-3"`}},
		"empty lr":                  {meta: base(contract.MetaInitLR, ""), wantErr: []string{contract.MetaInitLR + `: must be a positive finite number, got ""`}},
		"comma decimal lr":          {meta: base(contract.MetaInitLR, "0,1"), wantErr: []string{contract.MetaInitLR + `: must be a positive finite number, got "0,1"`}},
		"empty bool":                {meta: base(contract.MetaAccumulation, ""), wantErr: []string{contract.MetaAccumulation + `: want true or false, got ""`}},
		"yes bool":                  {meta: base(contract.MetaAccumulation, "yes"), wantErr: []string{contract.MetaAccumulation + `: want true or false, got "yes"`}},
		"unknown rule":              {meta: base(contract.MetaLRScaling, "cosine"), wantErr: []string{contract.MetaLRScaling + `: want adascale, adamscale, linear, sqrt, legw or none, got "cosine"`}},
		"rule in capitals":          {meta: base(contract.MetaLRScaling, "AdaScale"), wantErr: []string{contract.MetaLRScaling + `: want adascale, adamscale, linear, sqrt, legw or none, got "AdaScale"`}},
		"max batch below m0":        {meta: base(contract.MetaMaxBatchSize, "64"), wantErr: []string{contract.MetaMaxBatchSize + ": 64 is below " + contract.MetaInitBatchSize + " 128"}},
		"local max below local min": {meta: base(contract.MetaLocalBszMin, "64", contract.MetaLocalBszMax, "32"), wantErr: []string{contract.MetaLocalBszMax + ": 32 is below " + contract.MetaLocalBszMin + " 64"}},
		"local min above default local max": {meta: base(contract.MetaLocalBszMin, "256", contract.MetaMaxBatchSize, "4096"),
			wantErr: []string{contract.MetaLocalBszMax + ": 128 is below " + contract.MetaLocalBszMin + " 256"}},
		"local min above max batch": {meta: base(contract.MetaLocalBszMin, "256", contract.MetaLocalBszMax, "512"),
			wantErr: []string{contract.MetaLocalBszMin + ": 256 is above the largest batch size 128"}},
		"max gpus below min gpus": {meta: base(contract.MetaMinGPUs, "8", contract.MetaMaxGPUs, "4"), wantErr: []string{contract.MetaMaxGPUs + ": 4 is below " + contract.MetaMinGPUs + " 8"}},
		"min gpus cannot fit the largest batch": {meta: base(contract.MetaMinGPUs, "8", contract.MetaLocalBszMin, "32"),
			wantErr: []string{contract.MetaMinGPUs + ": 8 GPUs of at least " + contract.MetaLocalBszMin + " 32 exceed the largest batch size 128"}},
		"1 MiB batch size": {meta: base(contract.MetaInitBatchSize, mib), wantErr: []string{contract.MetaInitBatchSize + `: must be in [1, 16777216], got "7777777777777777777777777777777777777777..."`}},
		"1 MiB lr":         {meta: base(contract.MetaInitLR, mib), wantErr: []string{contract.MetaInitLR + `: must be a positive finite number, got "7777777777777777777777777777777777777777..."`}},
		"1 MiB rule":       {meta: base(contract.MetaLRScaling, strings.Repeat("z", 1<<20)), wantErr: []string{contract.MetaLRScaling + `: want adascale, adamscale, linear, sqrt, legw or none, got "zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz..."`}},
		"1 MiB bool":       {meta: base(contract.MetaAccumulation, strings.Repeat("y", 1<<20)), wantErr: []string{contract.MetaAccumulation + `: want true or false, got "yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy..."`}},
		"long unicode value cut at a rune boundary": {meta: base(contract.MetaInitBatchSize, strings.Repeat("é", 1000)),
			wantErr: []string{contract.MetaInitBatchSize + `: not an integer: "` + strings.Repeat("é", 20) + `..."`}},
		"every key bad at once": {
			meta: base(contract.MetaInitBatchSize, "x", contract.MetaInitLR, "x", contract.MetaMaxBatchSize, "x", contract.MetaLocalBszMin, "x", contract.MetaLocalBszMax, "x",
				contract.MetaAccumulation, "x", contract.MetaLRScaling, "x", contract.MetaMinGPUs, "x", contract.MetaMaxGPUs, "x"),
			wantErr: []string{contract.MetaInitBatchSize, contract.MetaInitLR, contract.MetaMaxBatchSize, contract.MetaLocalBszMin, contract.MetaLocalBszMax, contract.MetaAccumulation, contract.MetaLRScaling, contract.MetaMinGPUs, contract.MetaMaxGPUs},
		},
		"surrounding white space is accepted": {meta: base(contract.MetaInitBatchSize, " 128\n", contract.MetaInitLR, "\t0.1 ", contract.MetaLRScaling, " sqrt ", contract.MetaAccumulation, " false")},
		"largest values are accepted": {meta: base(contract.MetaInitBatchSize, "16777216", contract.MetaInitLR, "1e6", contract.MetaMaxBatchSize, "16777216",
			contract.MetaLocalBszMax, "16777216", contract.MetaMinGPUs, "16777216", contract.MetaMaxGPUs, "16777216")},
		"tiny lr is accepted":            {meta: base(contract.MetaInitLR, "1e-300")},
		"explicit empty rule is default": {meta: base(contract.MetaLRScaling, "")},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := ParseSpec(tc.meta)
			if len(tc.wantErr) == 0 {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				checkSpec(t, got)
				return
			}
			if err == nil {
				t.Fatalf("no error; spec %+v", got)
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %.300q does not contain %q", err, w)
				}
			}
			checkSpecError(t, err)
		})
	}
}

// TestParseSpecValidUnchanged pins the result for valid meta, so that
// the hardening changes nothing for jobs that were already accepted.
func TestParseSpecValidUnchanged(t *testing.T) {
	got, err := ParseSpec(map[string]string{
		contract.MetaEnabled: "true", contract.MetaInitBatchSize: " 128", contract.MetaInitLR: "1E-1", contract.MetaMaxBatchSize: "4096",
		contract.MetaLocalBszMin: "+32", contract.MetaLocalBszMax: "0512", contract.MetaAccumulation: "T", contract.MetaLRScaling: "linear",
		contract.MetaMinGPUs: "2", contract.MetaMaxGPUs: "64", "pollux_unrelated": "ignored",
	})
	if err != nil {
		t.Fatal(err)
	}
	want := Spec{InitBatchSize: 128, InitLR: 0.1, MaxBatchSize: 4096, LocalBszMin: 32, LocalBszMax: 512,
		Accumulation: true, LRScaling: model.Linear, MinGPUs: 2, MaxGPUs: 64}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// FuzzParseSpec gives ParseSpec arbitrary values for every key; present
// says which keys are set (bit i for specKeys[i]). ParseSpec must not
// panic; an accepted spec obeys every bound; an error is short and each of
// its lines names a key.
func FuzzParseSpec(f *testing.F) {
	all := uint16(1<<len(specKeys) - 1)
	f.Add(uint16(3), "128", "0.1", "", "", "", "", "", "", "")
	f.Add(all, "128", "0.1", "4096", "32", "1024", "true", "adascale", "1", "16")
	f.Add(all, "9223372036854775808", "1e300", "99999999999999999999", "-1", "0", "maybe", "cosine", "0x10", "NaN")
	f.Add(all, " 64 ", "Inf", "64", "65", "64", "", "", "16777216", "1")
	f.Add(all, "16777216", "1e6", "16777216", "1", "16777216", "false", "none", "16777216", "16777216")
	f.Add(uint16(0), "", "", "", "", "", "", "", "", "")
	f.Add(all, strings.Repeat("9", 4096), strings.Repeat("é", 2048), "１２８", "\x00", "\xff\xfe", "\u00a0true", "sqrt\n", "1e3", "+1")
	f.Fuzz(func(t *testing.T, present uint16, initBatch, initLR, maxBatch, localMin, localMax, accum, rule, minGPUs, maxGPUs string) {
		values := []string{initBatch, initLR, maxBatch, localMin, localMax, accum, rule, minGPUs, maxGPUs}
		meta := map[string]string{contract.MetaEnabled: "true"}
		for i, k := range specKeys {
			if present&(1<<i) != 0 {
				meta[k] = values[i]
			}
		}
		s, err := ParseSpec(meta)
		if err != nil {
			checkSpecError(t, err)
			return
		}
		checkSpec(t, s)
		if present&3 != 3 {
			t.Errorf("accepted meta without %s or %s: %+v", contract.MetaInitBatchSize, contract.MetaInitLR, s)
		}
	})
}
