module slurmpool.io/lab/pause

go 1.26.0
