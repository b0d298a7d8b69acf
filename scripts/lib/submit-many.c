/* submit-many — submit N batch jobs through libslurm as fast as one client can
 * (scripts/bench-slurm). sbatch spends ~10 ms per job starting a process and parsing
 * slurm.conf; this client spends ~0.1 ms, so submissions/s measure the controller.
 *
 *   submit-many N ACCOUNT GPUS SLEEP_S [BEGIN_DELAY_S]
 * Prints "N submitted in S s" on stdout; exit 1 on the first failure.
 * Build: gcc -O2 -o submit-many submit-many.c -lslurm
 */
#include <slurm/slurm.h>
#include <slurm/slurm_errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	if (argc < 5) {
		fprintf(stderr, "usage: %s N ACCOUNT GPUS SLEEP_S [BEGIN_DELAY_S]\n", argv[0]);
		return 2;
	}
	int n = atoi(argv[1]);
	int gpus = atoi(argv[3]);
	int sleep_s = atoi(argv[4]);
	long begin_delay = argc > 5 ? atol(argv[5]) : 0;
	char script[128], tres[64];
	char *env[] = { "PATH=/usr/bin:/bin", NULL };
	struct timespec t0, t1;

	snprintf(script, sizeof(script), "#!/bin/sh\nsleep %d\n", sleep_s);
	snprintf(tres, sizeof(tres), "gres:gpu:%d", gpus);
	slurm_init(NULL);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (int i = 0; i < n; i++) {
		job_desc_msg_t d;
		submit_response_msg_t *resp = NULL;

		slurm_init_job_desc_msg(&d);
		d.name = "bench";
		d.account = argv[2];
		d.script = script;
		d.environment = env;
		d.env_size = 1;
		d.user_id = getuid();
		d.group_id = getgid();
		d.work_dir = "/tmp";
		d.std_out = "/dev/null";
		d.std_err = "/dev/null";
		d.min_nodes = 1;
		d.min_cpus = 1;
		/* Without a memory request a job gets all of its node's memory under
		 * CR_Core_Memory (no DefMemPerCPU): one job per node. */
		d.pn_min_memory = 1000;
		d.time_limit = 10;
		if (gpus > 0)
			d.tres_per_node = tres;
		if (begin_delay > 0)
			d.begin_time = time(NULL) + begin_delay;
		if (slurm_submit_batch_job(&d, &resp) != SLURM_SUCCESS) {
			fprintf(stderr, "job %d: %s\n", i, slurm_strerror(slurm_get_errno()));
			return 1;
		}
		slurm_free_submit_response_response_msg(resp);
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	printf("%d submitted in %.3f s\n", n,
	       (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9);
	slurm_fini();
	return 0;
}
