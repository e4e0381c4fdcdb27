module burrito-py/bench/static_server

go 1.22
