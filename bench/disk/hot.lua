-- wrk script: GET /hot/<n> for n uniformly random in [0, HOT), HOT from the env.
local hot = tonumber(os.getenv("HOT") or "1000")
math.randomseed(7)
request = function()
   return wrk.format("GET", "/hot/" .. math.random(0, hot - 1))
end
