package main

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestProcessCPUSeconds(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       float64
		wantErr    string
	}{
		{
			name: "apiserver",
			body: `# HELP apiserver_request_total [STABLE] Counter of apiserver requests.
# TYPE apiserver_request_total counter
apiserver_request_total{code="200",verb="GET"} 7
# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.
# TYPE process_cpu_seconds_total counter
process_cpu_seconds_total 123.45
# HELP process_cpu_seconds_total_extra A name that only starts the same.
# TYPE process_cpu_seconds_total_extra counter
process_cpu_seconds_total_extra 9
`,
			want: 123.45,
		},
		{name: "untyped", body: "process_cpu_seconds_total 2e1\n", want: 20},
		{name: "absent", body: "# TYPE go_goroutines gauge\ngo_goroutines 5\n", wantErr: "want one sample of process_cpu_seconds_total, found 0"},
		{name: "gauge", body: "# TYPE process_cpu_seconds_total gauge\nprocess_cpu_seconds_total 3\n", wantErr: "is a GAUGE, want a counter"},
		{name: "garbage", body: "process_cpu_seconds_total twelve\n", wantErr: "parsing the metrics"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := processCPUSeconds(strings.NewReader(tc.body))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("processCPUSeconds = %v, %v; want an error with %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("processCPUSeconds = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

func TestMaxMinRatio(t *testing.T) {
	for _, tc := range []struct {
		xs   []float64
		want float64 // NaN: none
	}{
		{[]float64{2, 2, 2}, 1},
		{[]float64{3, 1.5, 2}, 2},
		{[]float64{1, 4}, 4},
		{[]float64{5}, 1},
		{[]float64{2, 0, 1}, math.NaN()},
		{nil, math.NaN()},
	} {
		got := maxMinRatio(tc.xs)
		if math.IsNaN(tc.want) != math.IsNaN(got) || (!math.IsNaN(got) && math.Abs(got-tc.want) > 1e-9) {
			t.Errorf("maxMinRatio(%v) = %v, want %v", tc.xs, got, tc.want)
		}
	}
}

func TestCostTargets(t *testing.T) {
	for _, tc := range []struct{ targets, want string }{
		{"direct,fanout,haproxy,library,fanout-tls", "fanout|haproxy leastconn|haproxy roundrobin|direct"},
		{"haproxy,direct", "haproxy leastconn|haproxy roundrobin|direct"},
		{"library,fanout-tls", ""},
	} {
		if got := strings.Join(costTargets(strings.Split(tc.targets, ",")), "|"); got != tc.want {
			t.Errorf("costTargets(%s) = %q, want %q", tc.targets, got, tc.want)
		}
	}
}

func TestRenderCostBalance(t *testing.T) {
	r := &CostBalanceResult{
		APIServers: []string{"https://10.0.0.1:6443", "https://10.0.0.2:6443", "https://10.0.0.3:6443"},
		Objects:    3000, ObjectBytes: 1024, GetRate: 50, ListRateA: 0.2, ListRateB: 2,
		Warmup: 3 * time.Second, Phase: time.Minute, LoadStart: "2.00 1.50 1.00", LoadEnd: "3.00 2.00 1.00",
		Rows: []CostBalanceRow{
			{Target: costFanout, CPU: []float64{6, 4, 5}, Gets: []int{1000, 1010, 990}, Lists: []int{40, 44, 48},
				Streams: []CostStream{{Name: "A GET", Offered: 50, Sent: 3000, OK: 3000, Achieved: 50}, {Name: "B LIST", Offered: 2, Sent: 120, OK: 118, Errors: 2, Achieved: 1.97, FirstErr: "boom"}}},
			{Target: costDirect, CPU: []float64{9, 12, 0}, Gets: []int{3000}},
		},
	}
	var b strings.Builder
	renderCostBalance(&b, r, "`fanout-bench -sections costbalance` in `e2e/`")
	got := b.String()
	for _, want := range []string{
		"## 6. Apiserver CPU under a mixed GET/LIST workload",
		"### Apiserver CPU under a mixed GET/LIST workload\n",
		"Command: `fanout-bench -sections costbalance` in `e2e/`. Load average (1, 5, 15 min) at the start of the section 2.00 1.50 1.00, at its end 3.00 2.00 1.00.\n",
		"3000 ConfigMaps of 1024 bytes",
		"GETs of one of them at 50 req/s and LISTs of all at 0.2 req/s, client B only LISTs of all at 2 req/s",
		"a 3s warm-up and a 1m0s phase",
		"| fanout | 6.00 / 4.00 / 5.00 | 1.50 | 1000 + 40 / 1010 + 44 / 990 + 48 |\n",
		// An idle apiserver has no ratio; missing audit counts show as —.
		"| direct | 9.00 / 12.00 / 0.00 | — | 3000 + — / — + — / — + — |\n",
		"| fanout | B LIST | 2 | 120 | 2 | 1.97 |\n",
		"First error of B LIST via fanout: `boom`",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("rendered section lacks %q:\n%s", want, got)
		}
	}

	b.Reset()
	renderCostBalance(&b, nil, "")
	if got := b.String(); !strings.Contains(got, "Not measured") || !strings.Contains(got, "-sections costbalance -out") {
		t.Errorf("unmeasured section = %q", got)
	}
	// The report carries the section, with the run's command.
	rep := Render(&Report{CostBalance: r, Command: "fanout-bench -sections costbalance", Via: "make bench BENCH_ARGS='-sections costbalance'"})
	if !strings.Contains(rep, "Command: `make bench BENCH_ARGS='-sections costbalance'`, which ran `fanout-bench -sections costbalance` in `e2e/`. Load average") {
		t.Errorf("report lacks the section with its command:\n%s", rep)
	}
}

func TestHAProxyBalance(t *testing.T) {
	base := HAProxyConfig{Listen: "127.0.0.1:7080", Servers: []string{"10.0.0.1:6443"}, CAFile: "/ca", ClientPEM: "/c.pem"}
	for balance, want := range map[string]string{"": "    balance roundrobin\n", "roundrobin": "    balance roundrobin\n", "leastconn": "    balance leastconn\n"} {
		c := base
		c.Balance = balance
		cfg, err := c.Render()
		if err != nil || !strings.Contains(cfg, want) {
			t.Errorf("Balance %q: %v, config lacks %q:\n%s", balance, err, want, cfg)
		}
	}
	c := base
	c.Balance = "source"
	if _, err := c.Render(); err == nil || !strings.Contains(err.Error(), "want roundrobin or leastconn") {
		t.Errorf("Balance source: %v, want an error naming the choices", err)
	}
}

func TestCostFlags(t *testing.T) {
	o, _, _, _, err := parseFlags([]string{"-sections", "costbalance", "-quick"})
	if err != nil {
		t.Fatal(err)
	}
	if !o.Sections["costbalance"] || len(o.Sections) != 1 || o.CostPhase != 10*time.Second || o.CostObjects != 3000 || o.CostListRateB != 2 {
		t.Errorf("options = %+v", o)
	}
	for _, bad := range [][]string{{"-cost-objects", "0"}, {"-cost-phase", "0s"}, {"-cost-get-rate", "-1"}} {
		if _, _, _, _, err := parseFlags(bad); err == nil || !strings.Contains(err.Error(), bad[0]) {
			t.Errorf("%v: %v, want an error naming %s", bad, err, bad[0])
		}
	}
}
