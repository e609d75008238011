package workload_test

import (
	"fmt"
	"os"
	"strings"

	"github.com/pollux-nomad/pollux/workload"
)

func ExampleParse() {
	const csv = `name,time,application,num_replicas,batch_size
cifar10-0,53,cifar10,6,2048
deepspeech2-1,326,deepspeech2,8,320
`
	known := func(app string) bool { return app == "cifar10" || app == "deepspeech2" }
	jobs, err := workload.Parse(strings.NewReader(csv), "demo.csv", known)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, j := range jobs {
		fmt.Printf("%s at %gs: %d GPUs, batch %d\n", j.Name, j.Time, j.NumReplicas, j.BatchSize)
	}

	_, err = workload.Parse(strings.NewReader(csv+"gpt-2,400,gpt,1,8\n"), "demo.csv", known)
	fmt.Println(err)
	// Output:
	// cifar10-0 at 53s: 6 GPUs, batch 2048
	// deepspeech2-1 at 326s: 8 GPUs, batch 320
	// demo.csv:4: application: unknown "gpt"
}

func ExampleWrite() {
	jobs := []workload.Job{
		{Name: "ncf-0", Time: 12, Application: "ncf", NumReplicas: 1, BatchSize: 256},
		{Name: "bert-1", Time: 90.5, Application: "bert", NumReplicas: 2, BatchSize: 24},
	}
	// Submit twice as fast, and keep only the first job.
	short := workload.First(workload.Compress(jobs, 2), 1)
	if err := workload.Write(os.Stdout, append(short, jobs[1])); err != nil {
		fmt.Println(err)
	}
	// Output:
	// name,time,application,num_replicas,batch_size
	// ncf-0,6,ncf,1,256
	// bert-1,90.5,bert,2,24
}
