module burrito-py/bench/static_mirror

go 1.22
