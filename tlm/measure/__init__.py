"""Stage 3, measure: programs are built, checked against the untuned task and timed; every result
is kept.

Candidate (task + schedule)  --measurer-->  MeasureResult (latencies | error)  --database-->  Record

- measurer.py   LLVM build + timed run through MetaSchedule's builder/runner, RPC, batch API
- workers.py    what the builder/runner worker processes run (the output check lives here)
- database.py   the durable SQLite record database; which record a task compiles with
- shards.py     the corpus in git: append-only xz shards per hardware, flushed from / ingested into a database

GPU programs, built here (no GPU) and measured on a machine with one (CuPy + nvcc, no TVM there):
- cuda_build.py   scheduled program -> CUDA C + launch plan (kernels, grids, blocks, workspaces)
- nvcc.py         CUDA C -> cubin with NVIDIA's compiler; ptxas's resources; launch limits
- gpu_bundle.py   tasks -> a bundle: random programs, dlight references, CPU checks (`tlm gpu bundle`)
- precompile.py   a bundle's or plan's cubins compiled here, carried with it (`tlm gpu precompile`)
- cuda_runner.py  on the GPU machine: compile what was not compiled ahead, supervise the measuring process
- cuda_measure.py the measuring process: check every program against the reference, time it
- gpu_ingest.py   a run's results -> records under the card -> corpus shards (`tlm gpu ingest`)
- gpu_cli.py      `tlm gpu bundle|precompile|run|ingest` (`plan`: tlm.compiler.gpu_plan registers it)
- cuda_plan.py    on the GPU machine: a whole-model plan compiled, checked, timed (whole, CUDA graph, per step)
- plan_assemble.py on the GPU machine: a plan with the best programs a run just measured in its tasks' places
- cuda_local.py   the CUDA measurer where the GPU is (tuning there): each batch a one-batch bundle, run by cuda_runner
"""
