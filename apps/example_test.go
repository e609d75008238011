package apps_test

import (
	"fmt"

	"github.com/pollux-nomad/pollux/apps"
	"github.com/pollux-nomad/pollux/data"
)

func ExampleLoadAll() {
	all, err := apps.LoadAll(data.Traces())
	if err != nil {
		panic(err)
	}
	for _, name := range apps.Names() {
		a := all[name]
		fmt.Printf("%-11s M0 %5d  max %5d  local [%d, %d]  epochs %3d  work %.0f\n",
			a.Name, a.InitBatchSize, a.MaxBatchSize, a.MinLocalBsz, a.MaxLocalBsz, a.MaxEpochs, a.Progress(a.MaxEpochs))
	}
	// Output:
	// bert        M0    12  max   384  local [4, 12]  epochs   2  work 14774
	// cifar10     M0   128  max  4096  local [32, 1024]  epochs 100  work 39063
	// deepspeech2 M0    20  max   640  local [10, 80]  epochs  80  work 28536
	// imagenet    M0   200  max 12800  local [20, 200]  epochs  90  work 576526
	// ncf         M0   256  max 32768  local [32, 32768]  epochs  10  work 194174
	// yolov3      M0     8  max   512  local [4, 8]  epochs  50  work 103444
}

func ExampleApplication_Throughput() {
	all, err := apps.LoadAll(data.Traces())
	if err != nil {
		panic(err)
	}
	a := all["bert"]
	for _, q := range []struct {
		placement []int
		localBsz  int
	}{
		{[]int{1}, 4},             // measured
		{[]int{1}, 5},             // between measured local_bsz 4 and 6
		{[]int{4, 4, 4, 4, 4}, 8}, // 5 nodes: 3-D interpolation
	} {
		step, sync, err := a.Throughput(q.placement, q.localBsz)
		if err != nil {
			panic(err)
		}
		fmt.Printf("%v local_bsz %d: step %.4f s, sync %.4f s\n", q.placement, q.localBsz, step, sync)
	}
	// Output:
	// [1] local_bsz 4: step 0.4553 s, sync 0.0137 s
	// [1] local_bsz 5: step 0.5124 s, sync 0.0137 s
	// [4 4 4 4 4] local_bsz 8: step 1.7813 s, sync 1.1340 s
}
