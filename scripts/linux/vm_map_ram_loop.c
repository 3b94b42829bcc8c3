// SPDX-License-Identifier: MIT OR Apache-2.0
/*
 * mmkit-kernel's seed 002 loop on Linux: one kthread bound to each online
 * CPU maps nr_pages pages with vm_map_ram(), writes one byte to each page
 * and unmaps them with vm_unmap_ram(). A tenth of the iterations run
 * untimed first, so per-CPU blocks and page tables exist before the clock
 * starts, as in mmkit-kernel.
 *
 * The result is one line in the kernel log:
 *   vm_map_ram_loop: cpus=N pages=N iters=N ns_per_op=N failed=N
 * init returns -EAGAIN, so the module never stays loaded.
 */
#include <linux/module.h>
#include <linux/kthread.h>
#include <linux/vmalloc.h>
#include <linux/gfp.h>
#include <linux/mm.h>
#include <linux/completion.h>
#include <linux/atomic.h>
#include <linux/ktime.h>
#include <linux/cpumask.h>
#include <linux/slab.h>

static int iterations = 2000;
module_param(iterations, int, 0444);
MODULE_PARM_DESC(iterations, "timed iterations per CPU");

static int nr_pages = 4;
module_param(nr_pages, int, 0444);
MODULE_PARM_DESC(nr_pages, "pages per mapping (1 to 64)");

static atomic64_t total_ns;
static atomic_t failed;
static atomic_t running;
static DECLARE_COMPLETION(all_done);
static DECLARE_COMPLETION(go);

static int loop_on_cpu(void *unused)
{
	struct page *pages[64];
	int warm = iterations / 10;
	u64 t0 = 0;
	int i, p, got = 0;

	for (p = 0; p < nr_pages; p++) {
		pages[p] = alloc_page(GFP_KERNEL);
		if (!pages[p])
			break;
		got++;
	}
	/* Every thread starts together, as mmkit-kernel's run_on does. */
	wait_for_completion(&go);
	if (got < nr_pages) {
		atomic_inc(&failed);
		goto out;
	}
	for (i = 0; i < iterations + warm; i++) {
		char *va;

		if (i == warm)
			t0 = ktime_get_ns();
		va = vm_map_ram(pages, nr_pages, NUMA_NO_NODE);
		if (!va) {
			atomic_inc(&failed);
			continue;
		}
		for (p = 0; p < nr_pages; p++)
			WRITE_ONCE(va[p * PAGE_SIZE], (char)i);
		vm_unmap_ram(va, nr_pages);
	}
	atomic64_add(ktime_get_ns() - t0, &total_ns);
out:
	for (p = 0; p < got; p++)
		__free_page(pages[p]);
	if (atomic_dec_and_test(&running))
		complete(&all_done);
	return 0;
}

static int __init vm_map_ram_loop_init(void)
{
	unsigned int cpu, cpus = 0;
	u64 ops;

	if (iterations < 1 || nr_pages < 1 || nr_pages > 64)
		return -EINVAL;
	atomic_set(&running, 1);
	for_each_online_cpu(cpu) {
		struct task_struct *t;

		t = kthread_create(loop_on_cpu, NULL, "vm_map_ram_loop/%u", cpu);
		if (IS_ERR(t)) {
			atomic_inc(&failed);
			continue;
		}
		kthread_bind(t, cpu);
		atomic_inc(&running);
		wake_up_process(t);
		cpus++;
	}
	complete_all(&go);
	if (atomic_dec_and_test(&running))
		complete(&all_done);
	wait_for_completion(&all_done);
	ops = (u64)iterations * cpus;
	pr_info("vm_map_ram_loop: cpus=%u pages=%d iters=%d ns_per_op=%llu failed=%d\n",
		cpus, nr_pages, iterations,
		ops ? div64_u64(atomic64_read(&total_ns), ops) : 0,
		atomic_read(&failed));
	return -EAGAIN;
}

module_init(vm_map_ram_loop_init);
MODULE_LICENSE("Dual MIT/GPL");
MODULE_DESCRIPTION("seed 002's vm_map_ram loop, one bound kthread per CPU");
