-- wrk script: GET PREFIX<n> for n = FROM, FROM+1, ... (each thread its own stride), stopping
-- the thread once n reaches TO. Fills a cache with TO-FROM distinct objects, or, with TO
-- unset, makes every request a miss (a new URL each time). PREFIX, FROM, TO from the env.
local prefix = os.getenv("PREFIX") or "/objects/"
local from = tonumber(os.getenv("FROM") or "0")
local to = tonumber(os.getenv("TO") or "-1")
local threads = tonumber(os.getenv("THREADS") or "1")
local n, id
setup = function(thread)
   thread:set("tid", (id or 0))
   id = (id or 0) + 1
end
init = function()
   n = from + (tid or 0)
end
request = function()
   local path = prefix .. n
   n = n + threads
   return wrk.format("GET", path)
end
response = function()
   if to >= 0 and n >= to then
      wrk.thread:stop()
   end
end
